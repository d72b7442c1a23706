"""``LocalFeatureStore``: one partition's node and edge attributes, as a PyG ``FeatureStore``."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from pyg_dist.format import _partition_io as io, _validate as validate
from pyg_dist.format._book import RangeBook
from pyg_dist.format._part_manifest import check_files
from pyg_dist.format._meta import PartitionMeta
from pyg_dist._madvise import MADV_DONTNEED, advise
from pyg_dist.store._original_ids import OwnedIds, PartitionIds, take_rows
from pyg_dist.store._every_node import assemble, is_every_node, rows_of
from pyg_dist.store._from_tensors import MemoryFeatures, feature_group
from pyg_dist.store._pyg_features import PygFeatureApi, StoreAttr, tensor_attrs
from pyg_dist.store._source import FileId, PartitionSource, advise_rows
from pyg_dist._typing import EdgeType, NodeType, edge_key

Group = Union[NodeType, EdgeType]


class LocalFeatureStore(PygFeatureApi, FeatureStore):
    """Attributes of the nodes and edges one partition owns, as a PyG ``FeatureStore``.

    ``get_tensor(group_name, attr_name, index)``, ``multi_get_tensor`` and
    ``put_tensor(..., index=...)`` take the dataset's **original** ids of nodes (edges)
    the partition owns (``group_name`` is ``None`` for homogeneous graphs, a node type
    or an edge type otherwise), as PyG's loaders pass them, and raise a one-line error
    naming ``index`` for ids it does not own, out of range, or not integers. The lookup
    is local (``searchsorted`` over the partition's mapped original ids; see
    :class:`~pyg_dist.store._original_ids.OwnedIds`). ``index=None`` returns (``put_tensor``:
    takes) every owned row, in the partition's row order, aligned with
    :attr:`_global_id`. For a homogeneous graph, ``group_name=None`` also finds edge
    attributes (e.g. ``edge_attr``) when no node attribute has that name.

    pyg_dist's own sampler reads rows by relabelled (internal range) id through
    :meth:`gather`; :attr:`id_tables` translates between the two spaces.

    ``LocalFeatureStore()`` (no arguments), :meth:`from_data` and
    :meth:`from_hetero_data` build a store in memory as PyG's do
    (:mod:`pyg_dist.store._from_tensors`): it holds what is put, and ``index`` takes the ids
    given by :meth:`put_global_id` (row numbers where none were given). PyG's other
    names (``get_global_id``, ``get_tensor_from_global_id``, ``num_partitions``,
    ``partition_idx``, ``node_feat_pb``, ...) are in
    :class:`~pyg_dist.store._pyg_features.PygFeatureApi`.

    Args:
        meta (PartitionMeta, optional): the description of the whole partitioned graph
            (``None``: a store in memory).
        part (int): the partition this store holds.
        node_feats (Dict[NodeType, Dict[str, Tensor]]): owned node rows, in id order.
        edge_feats (Dict[EdgeType, Dict[str, Tensor]]): owned edge rows, in id order.
        splits (Dict[NodeType, Dict[str, Tensor]]): global ids of owned nodes per split
            (``train``, ``val``, ``test``, ...).
    """

    def __init__(self, meta: Optional[PartitionMeta] = None, part: int = 0,
                 node_feats: Optional[Dict[NodeType, Dict[str, Tensor]]] = None,
                 edge_feats: Optional[Dict[EdgeType, Dict[str, Tensor]]] = None,
                 splits: Optional[Dict[NodeType, Dict[str, Tensor]]] = None) -> None:
        super().__init__(tensor_attr_cls=StoreAttr)
        self.meta = meta
        self.part = part
        #: what is put into a store built in memory (``None``: opened from a partition)
        self.memory: Optional[MemoryFeatures] = MemoryFeatures() if meta is None else None
        node_feats, edge_feats = node_feats or {}, edge_feats or {}
        self._tensors: Dict[Group, Dict[str, Tensor]] = {}
        for node_type in meta.node_types if meta else ():
            self._tensors[node_type] = dict(node_feats.get(node_type, {}))
        for edge_type in meta.edge_types if meta else ():
            self._tensors[edge_type] = dict(edge_feats.get(edge_type, {}))
        self.splits = splits or {}
        self._books: Dict[Group, RangeBook] = {}
        if meta is not None:
            self._books = {t: meta.node_book(t) for t in meta.node_types}
            self._books.update({t: meta.edge_book(t) for t in meta.edge_types})
        self._labels: Optional[Tensor] = None
        #: node attributes held for every node, by ``(node type, name)`` (PyG's node
        #: ``time``; :mod:`pyg_dist.store._every_node`)
        self.every_node: Dict[Tuple[NodeType, str], Tensor] = {}
        #: the mapped feature files (``None``: tensors held in this process's memory)
        self.source: Optional[PartitionSource] = None
        #: ``(group, attribute)`` still exactly as mapped from the files (never written)
        self.from_file: Set[Tuple[Group, str]] = set()
        self._file_versions: Dict[Tuple[Group, str], int] = {}  # in-place write counters
        self._sealed: Optional[str] = None
        #: original ids of the owned nodes and edges (read on first use; a store built
        #: in memory has ids that were never relabelled)
        self.id_tables = PartitionIds(meta, None)

    @classmethod
    def from_partition(cls, root: Union[str, Path], pid: int, mmap: bool = True,
                       verify: bool = False) -> "LocalFeatureStore":
        """Opens partition ``pid`` of the partition folder ``root``.

        The partition's ``graph.pt`` must carry the ``uid`` of ``META.json`` (read
        without loading its tensors), and every loaded tensor is checked against
        ``META.json`` (:mod:`pyg_dist.format._validate`): one row per owned id,
        dtype and per-row shape as declared, split ids in the owned range.

        Args:
            root (str or Path): the partition folder.
            pid (int): the partition.
            mmap (bool): map the feature files read-only and copy-on-write (default):
                opening is constant time, every process on the machine shares one copy
                in the page cache, rows are read on first touch, and features larger
                than memory still work (the OS pages them in and out). Rows written
                with ``put_tensor`` stay private to this process; files are never
                modified. ``False`` reads them into this process's memory.
            verify (bool): also check the digests of mapped files, the original id
                files ``node_ids.pt``/``edge_ids.pt`` included (reads them once;
                default ``False`` keeps a mapped open constant-time). Files read in full
                (``splits.pt`` always, the feature files with ``mmap=False``) are always
                checked against the digests their ``MANIFEST.json`` records, and every
                file's size is (:mod:`pyg_dist.format._part_manifest`).

        Raises:
            PartitionFormatError: naming the file and the problem
                (:class:`~pyg_dist.format._part_manifest.PartitionDigestError` when its
                bytes differ from the digest recorded at write time).
            TypeError: ``root``, ``pid``, ``mmap`` or ``verify`` of the wrong type.
        """
        root, pid = io.check_open_args(root, pid, mmap=mmap, verify=verify)
        meta = io.read_meta(root)
        folder = io.check_part(root, meta, pid)
        validate.check_uid(folder / io.GRAPH_FILE, io.read_uid(folder), meta)
        feats = (io.NODE_FEATS_FILE, io.EDGE_FEATS_FILE)
        ids = io.id_files(meta)  # batches report these ids
        full = (io.SPLITS_FILE,) + (feats if verify or not mmap else ()) + \
            ((io.GRAPH_FILE,) + ids if verify else ())
        check_files(folder, meta, pid, (io.GRAPH_FILE, *feats, io.SPLITS_FILE) + ids, full)
        source = PartitionSource(str(Path(root).absolute()), pid, tuple(
            FileId.of(folder / name) for name in (io.NODE_FEATS_FILE, io.EDGE_FEATS_FILE)))
        nodes, edges = cls._open(meta, pid, folder, mmap)
        splits = validate.check_splits(io.load_pt(folder / io.SPLITS_FILE, "split file"),
                                       meta, pid, folder / io.SPLITS_FILE)
        store = cls(meta, pid, nodes, edges, splits)
        store.id_tables = PartitionIds(meta, str(Path(root).absolute()))
        if mmap:
            source.check_unchanged()  # the files mapped are the ones identified
            store.source = source
            store.from_file = {(g, a) for g, attrs in store._tensors.items() for a in attrs}
            store._note_versions()
            advise_rows(t for attrs in store._tensors.values() for t in attrs.values())
        return store

    @staticmethod
    def _open(meta: PartitionMeta, pid: int, folder: Path, mmap: bool) -> tuple:
        """Checked node and edge attribute tensors of partition ``pid``."""
        node_path, edge_path = folder / io.NODE_FEATS_FILE, folder / io.EDGE_FEATS_FILE
        nodes = validate.check_node_feats(io.load_pt(node_path, "node feature file", mmap=mmap),
                                          meta, pid, node_path)
        edges = validate.check_edge_feats(io.load_pt(edge_path, "edge feature file", mmap=mmap),
                                          meta, pid, edge_path)
        return nodes, edges

    # ---- pickling: mapped tensors travel as their files, not their bytes -----------
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if self.id_tables.root is not None:  # assembled again from the folder when asked
            state["every_node"] = {}
        state["_tensors"] = {g: {a: t for a, t in attrs.items() if (g, a) not in self.from_file}
                             for g, attrs in self._tensors.items()}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.source is not None and self.from_file:
            self.source.check_unchanged()
            folder = Path(self.source.files[0].path).parent
            nodes, edges = self._open(self.meta, self.part, folder, mmap=True)
            mapped = {**nodes, **edges}
            for group, attr in self.from_file:
                self._tensors[group][attr] = mapped[group][attr]
            self._note_versions()
            advise_rows(self._tensors[g][a] for g, a in self.from_file)

    def _note_versions(self) -> None:
        """Remembers the in-place write counter of every mapped attribute as opened."""
        self._file_versions = {(g, a): self._tensors[g][a]._version for g, a in self.from_file}

    # ---- resolving names -----------------------------------------------------------
    def resolve(self, group_name: Optional[Group], attr_name: Optional[str] = None) -> Group:
        """Maps a user ``group_name`` to the stored node or edge type."""
        if isinstance(group_name, (tuple, list)) or (isinstance(group_name, str)
                                                     and "__" in group_name):
            return self.meta.edge_type(group_name)
        if group_name is None and not self.meta.is_hetero and attr_name is not None:
            node_type = self.meta.node_types[0]
            if attr_name not in self._tensors[node_type]:
                edge_type = self.meta.edge_types[0]
                if attr_name in self._tensors[edge_type]:
                    return edge_type
        return self.meta.node_type(group_name)

    def book(self, group: Group) -> RangeBook:
        return self._books[group]

    def has(self, group: Group, attr_name: str) -> bool:
        return attr_name in self._tensors.get(group, {})

    def tensor(self, group: Group, attr_name: str) -> Tensor:
        """The stored tensor (all owned rows) of a resolved group."""
        attrs = self._tensors[group]
        if attr_name not in attrs:
            raise KeyError(f"no attribute '{attr_name}' for {_group_str(group)} "
                           f"(stored: {sorted(attrs)})")
        return attrs[attr_name]

    def gather(self, group: Group, attr_name: str, ids: Tensor) -> Tensor:
        """Rows of owned **relabelled** ``ids`` (the internal range ids; the fast path
        used by pyg_dist's samplers and loaders). PyG's ``get_tensor`` takes original
        ids instead."""
        return self.tensor(group, attr_name).index_select(0, self._local_rows(group, ids))

    def drop_pages(self, group: Group, attr_name: str) -> bool:
        """Drops this process's resident pages of an attribute mapped from its file and
        never written since (``madvise(MADV_DONTNEED)``): they stay in the page cache and
        fault back in when read. For readers that sweep a whole attribute once (layer-wise
        inference reads every feature row in its first layer). Returns whether it did:
        not for attributes in memory, put, or written in place (a private mapping's
        written pages would be lost)."""
        if (group, attr_name) not in self.from_file:
            return False
        tensor = self.tensor(group, attr_name)
        if tensor._version != self._file_versions.get((group, attr_name)):
            return False  # written in place: those pages exist only here
        return advise(tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                      MADV_DONTNEED)

    def _local_rows(self, group: Group, ids: Tensor) -> Tensor:
        """Rows of owned relabelled ids."""
        ids = torch.as_tensor(ids)
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
        return self._books[group].to_local(self.part, ids.long())

    def owned_ids(self, group: Group) -> OwnedIds:
        """The original ids of the owned rows of a resolved group, with their lookup."""
        kind = "edge" if isinstance(group, tuple) else "node"
        return self.id_tables.owned(kind, group, self.part)

    def _original_rows(self, group: Group, index: Any) -> Tensor:
        """Rows of owned original ids given as a PyG ``index`` (tensor or slice)."""
        owned = self.owned_ids(group)
        if isinstance(index, slice):
            index = torch.arange(owned.total)[index]
        try:
            return owned.to_rows(index, "index")
        except ValueError as exc:
            raise ValueError(f"{exc} (get_tensor's index takes the dataset's original ids; "
                             f"partition-local rows r are index=get_global_id(group)[r])"
                             ) from None

    # ---- FeatureStore interface ----------------------------------------------------
    def seal(self, reason: str) -> None:
        """Refuses ``put_tensor``/``remove_tensor`` from now on, saying ``reason``."""
        self._sealed = reason

    def _check_writable(self, attr: TensorAttr) -> None:
        if self._sealed is not None:
            raise ValueError(f"cannot change attribute '{attr.attr_name}' of partition "
                             f"{self.part}: {self._sealed}")

    def _memory_group(self, attr: TensorAttr) -> Any:
        """The group of a store in memory; for ``None``, a homogeneous graph's edge
        attribute when no node attribute has the name (as :meth:`resolve`)."""
        group = feature_group(attr.group_name)
        if group is None and (None, attr.attr_name) not in self.memory.tensors and \
                ((None, None), attr.attr_name) in self.memory.tensors:
            return (None, None)
        return group

    def _put_tensor(self, tensor: Tensor, attr: TensorAttr) -> bool:
        self._check_writable(attr)
        if self.memory is not None:
            self.memory.put(tensor, self._memory_group(attr), attr.attr_name, attr.index)
            return True
        group = self.resolve(attr.group_name, attr.attr_name)
        attrs = self._tensors[group]
        self.every_node.pop((group, attr.attr_name), None)  # assembled again when asked
        if attr.index is None:
            expected = self._books[group].size(self.part)
            if tensor.size(0) != expected:
                raise ValueError(f"'{attr.attr_name}' of {_group_str(group)} needs one row per "
                                 f"owned id ({expected}), got {tensor.size(0)}")
            attrs[attr.attr_name] = tensor
            self.from_file.discard((group, attr.attr_name))
            return True
        rows = self._original_rows(group, attr.index)
        if attr.attr_name not in attrs:
            raise KeyError(f"cannot write rows of unknown attribute '{attr.attr_name}' of "
                           f"{_group_str(group)}; put the whole tensor first (index=None)")
        attrs[attr.attr_name][rows] = tensor  # a mapped tensor: private copy-on-write pages
        self.from_file.discard((group, attr.attr_name))
        return True

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        if self.memory is not None:
            return self.memory.get(self._memory_group(attr), attr.attr_name, attr.index)
        group = self.resolve(attr.group_name, attr.attr_name)
        if attr.attr_name not in self._tensors[group]:
            return None
        if is_every_node(group, attr.attr_name):  # PyG's node time: every node's
            whole = functools.partial(self.every_node_rows, group, attr.attr_name)
            return whole() if attr.index is None else \
                rows_of(self, whole, group, attr.attr_name, attr.index)
        if attr.index is None:
            return self._tensors[group][attr.attr_name]
        return take_rows(self._tensors[group][attr.attr_name],
                         self._original_rows(group, attr.index))

    def every_node_rows(self, node_type: NodeType, attr_name: str) -> Tensor:
        """Every node's rows of a node attribute PyG keeps for every node (``time``), in
        original id order: assembled from every partition on first use and kept
        (:mod:`pyg_dist.store._every_node`)."""
        key = (node_type, attr_name)
        if key not in self.every_node:
            self.every_node[key] = assemble(self, node_type, attr_name)
        return self.every_node[key]

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        self._check_writable(attr)
        if self.memory is not None:
            return self.memory.remove(self._memory_group(attr), attr.attr_name)
        group = self.resolve(attr.group_name, attr.attr_name)
        self.every_node.pop((group, attr.attr_name), None)
        self.from_file.discard((group, attr.attr_name))
        return self._tensors[group].pop(attr.attr_name, None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[Tuple[int, ...]]:
        tensor = self._get_tensor(TensorAttr(attr.group_name, attr.attr_name, None))
        return None if tensor is None else tuple(tensor.shape)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        """Every stored attribute, groups as PyG names them, in PyG's order (see
        :meth:`~pyg_dist.store._pyg_features.PygFeatureApi.pyg_attr_keys`)."""
        return tensor_attrs(self.pyg_attr_keys(), self._tensor_attr_cls)

    def attr_names(self, group: Group) -> List[str]:
        """The attributes stored for a resolved group (from the partition, or ``put``)."""
        return sorted(self._tensors.get(group, {}))

    def schema(self) -> Dict[str, List[Tuple[str, str, Tuple[int, ...]]]]:
        """Per group: ``(attribute, dtype, row shape)`` of what is stored (every rank of a
        job must store the same, since peers fetch each other's rows)."""
        return {_group_str(g): [(a, str(t.dtype), tuple(t.shape[1:]))
                                for a, t in sorted(attrs.items())]
                for g, attrs in self._tensors.items()}

    # ---- splits and sharing --------------------------------------------------------
    def split_ids(self, split: str, node_type: Optional[NodeType] = None) -> Tensor:
        """**Relabelled** ids of owned nodes in ``split`` (from ``<split>_mask`` at
        partition time); :func:`pyg_dist.node_split` returns them as original ids."""
        node_type = self.meta.node_type(node_type)
        splits = self.splits.get(node_type, {})
        if split not in splits:
            raise KeyError(f"no split '{split}' for node type '{node_type}' "
                           f"(splits: {sorted(splits)})")
        return splits[split]

    def share_memory_(self) -> "LocalFeatureStore":
        """Moves the stored tensors to shared memory (for sampler worker processes);
        tensors still mapped from the partition files are shared already (workers map
        the same files)."""
        for value in (self.memory.tensors.values() if self.memory is not None else ()):
            value.share_memory_()
        for group, attrs in self._tensors.items():
            for name, value in attrs.items():
                if (group, name) not in self.from_file:
                    value.share_memory_()
        return self

    def __repr__(self) -> str:
        if self.memory is not None:
            return f"LocalFeatureStore(in memory, attrs={self.memory.keys()})"
        groups = {_group_str(g): sorted(a) for g, a in self._tensors.items() if a}
        return f"LocalFeatureStore(part={self.part}/{self.meta.num_parts}, attrs={groups})"


def _group_str(group: Group) -> str:
    return f"edge type {edge_key(group)}" if isinstance(group, tuple) else f"node type '{group}'"
