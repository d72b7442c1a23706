"""``LocalGraphStore``: one partition's edges, as a PyG ``GraphStore``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore
from torch_geometric.data.graph_store import ConversionOutputType, EdgeLayout
from torch_geometric.typing import EdgeTensorType, OptTensor

from pyg_dist.format import _partition_io as io
from pyg_dist.format._book import RangeBook
from pyg_dist.format._part_manifest import check_files
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.format._validate import check_graph, check_uid
from pyg_dist.store._original_ids import PartitionIds
from pyg_dist.store._from_tensors import MemoryEdges
from pyg_dist.store._pyg_graph import PygGraphApi
from pyg_dist.store._source import FileId, PartitionSource, advise_rows
from pyg_dist._typing import EdgeType, NodeType, edge_type_of


@dataclass
class CSC:
    """In-edges of the destination nodes one partition owns.

    Column ``j`` is global destination id ``dst_offset + j``; ``indices`` hold global
    source ids; the edge at position ``i`` has global edge id ``edge_offset + i``.
    """
    indptr: Tensor
    indices: Tensor
    dst_offset: int
    edge_offset: int

    @property
    def num_dst(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    def edge_ids(self) -> Tensor:
        return torch.arange(self.edge_offset, self.edge_offset + self.num_edges)

    def coo(self) -> Tuple[Tensor, Tensor]:
        """Global ``(src, dst)`` ids of every stored edge, in edge id order."""
        deg = self.indptr[1:] - self.indptr[:-1]
        dst = torch.arange(self.dst_offset, self.dst_offset + self.num_dst)
        return self.indices, dst.repeat_interleave(deg)


class LocalGraphStore(PygGraphApi, GraphStore):
    """The in-edges (CSC by destination, global ids) of the nodes one partition owns.

    Sources owned by other partitions are this partition's *halo* nodes. Memory is
    O(partition + halo): the only whole-graph state is the partition book.

    Two views of the same edges:

    * PyG's ``GraphStore`` interface (``get_edge_index``, ``csc()``, ``coo()``,
      ``csr()``, ``get_all_edge_attrs``) speaks the dataset's **original** node and
      edge ids, as PyG's loaders expect: ``csc()`` returns ``(row, colptr, perm)`` over
      original node ids with ``perm`` holding the original edge id of every CSC
      position, so PyG's ``NeighborLoader`` over ``(feature_store, graph_store)`` of a
      one-partition folder gives the batches it gives over the original data.
      Homogeneous graphs report edge type ``None``, as PyG's remote backends do.
    * :attr:`csc_by_type` holds the stored CSC per edge type in **relabelled** ids
      (the partition's internal range ids), for pyg_dist's own sampler.

    ``LocalGraphStore()`` (no arguments), :meth:`from_data` and :meth:`from_hetero_data`
    build a store in memory as PyG's do: it holds the edges put (PyG's conversions
    apply). PyG's other names (``get_edge_id``, ``num_partitions``, ``node_pb``, ...)
    are in :class:`~pyg_dist.store._pyg_graph.PygGraphApi`.

    Args:
        meta (PartitionMeta, optional): the description of the whole partitioned graph
            (``None``: a store in memory).
        part (int): the partition this store holds.
        csc_by_type (Dict[EdgeType, CSC]): the stored edges per edge type, in
            relabelled ids.
        halo (Dict[NodeType, Tensor]): sorted global ids of halo nodes per type.
        halo_attrs (Dict[NodeType, Dict[str, Tensor]]): node attributes (e.g. ``time``)
            of those halo nodes, row-aligned with ``halo``.
    """

    def __init__(self, meta: Optional[PartitionMeta] = None, part: int = 0,
                 csc_by_type: Optional[Dict[EdgeType, CSC]] = None,
                 halo: Optional[Dict[NodeType, Tensor]] = None,
                 halo_attrs: Optional[Dict[NodeType, Dict[str, Tensor]]] = None) -> None:
        super().__init__()
        #: the partitioned graph; a dict for a store in memory (PyG's ``meta`` dict, as
        #: ``from_data`` sets it: ``{"is_hetero": ...}``)
        self.meta: Any = meta if meta is not None else {}
        self.part = part
        #: the stored in-edges per edge type, in relabelled ids (internal view)
        self.csc_by_type = csc_by_type or {}
        self.halo = halo or {}
        self.halo_attrs = halo_attrs or {}
        #: edges put by the user (all edges of a store in memory), with their ids
        self.memory = MemoryEdges()
        types = (meta.node_types, meta.edge_types) if meta is not None else ((), ())
        self._node_books = {t: meta.node_book(t) for t in types[0]}
        self._edge_books = {t: meta.edge_book(t) for t in types[1]}
        #: the mapped ``graph.pt`` (``None``: tensors held in this process's memory)
        self.source: Optional[PartitionSource] = None
        #: original ids of every partition's nodes and edges (read on first use; a
        #: store built in memory has ids that were never relabelled)
        self.id_tables = PartitionIds(meta, None)
        self._stored_original: Dict[EdgeType, bool] = {}

    @classmethod
    def from_partition(cls, root: Union[str, Path], pid: int, mmap: bool = True,
                       verify: bool = False) -> "LocalGraphStore":
        """Opens partition ``pid`` of the partition folder ``root``.

        Everything loaded is checked first (:func:`~pyg_dist.format._validate.check_graph`):
        structure, dtypes, monotonic ``indptr``, and that the partition has the ``uid``
        of ``META.json``; with ``mmap=False`` also every source id (with ``mmap=True``
        samplers check the ids they read). ``graph.pt`` must have the size its
        ``MANIFEST.json`` records and, when it is read in full (``mmap=False`` or
        ``verify=True``), its digest (:mod:`pyg_dist.format._part_manifest`).

        Args:
            root (str or Path): the partition folder.
            pid (int): the partition.
            mmap (bool): map ``graph.pt`` read-only (default): opening is constant time
                and every process on the machine shares one copy in the page cache.
                ``False`` reads it into this process's memory.
            verify (bool): also check the digests of a mapped ``graph.pt`` and of the
                original id files ``node_ids.pt``/``edge_ids.pt`` (reads them once;
                default ``False`` keeps a mapped open constant-time).

        Raises:
            PartitionFormatError: naming the file and the problem
                (:class:`~pyg_dist.format._part_manifest.PartitionDigestError` when its
                bytes differ from the digest recorded at write time).
            TypeError: ``root``, ``pid``, ``mmap`` or ``verify`` of the wrong type.
        """
        root, pid = io.check_open_args(root, pid, mmap=mmap, verify=verify)
        meta = io.read_meta(root)
        path = io.check_part(root, meta, pid) / io.GRAPH_FILE
        check_uid(path, io.read_uid(path.parent), meta)  # another run's partition: say so
        names = (io.GRAPH_FILE,) + io.id_files(meta)  # batches report these ids
        full = names if verify else (io.GRAPH_FILE,) if not mmap else ()
        check_files(path.parent, meta, pid, names, full)
        source = PartitionSource(str(Path(root).absolute()), pid, (FileId.of(path),))
        store = cls._open(meta, pid, path, mmap, deep=not mmap)
        store.id_tables = PartitionIds(meta, str(Path(root).absolute()))
        if mmap:
            source.check_unchanged()  # the file mapped is the one identified
            store.source = source
            store._advise()
        return store

    def _advise(self) -> None:
        """Neighbour lists are read at random (see :func:`advise_rows`)."""
        advise_rows(t for csc in self.csc_by_type.values() for t in (csc.indptr, csc.indices))

    @classmethod
    def _open(cls, meta: PartitionMeta, pid: int, path: Path, mmap: bool,
              deep: bool) -> "LocalGraphStore":
        graph = check_graph(io.load_pt(path, "graph file", mmap=mmap), meta, pid, path, deep)
        csc = {et: CSC(indptr, indices, meta.node_offsets[et[2]][pid], meta.edge_offsets[et][pid])
               for et, (indptr, indices) in graph.csc.items()}
        return cls(meta, pid, csc, graph.halo, graph.halo_attrs)

    @property
    def graph_file(self) -> str:
        """The file the partition's edges come from (for error messages)."""
        if self.source is not None:
            return self.source.files[0].path
        return f"partition {self.part} (held in memory)"

    # ---- pickling: a mapped store travels as its file, not its bytes -----------
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if self.source is not None:
            state.update(csc_by_type=None, halo=None, halo_attrs=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.source is not None:
            self.source.check_unchanged()
            path = Path(self.source.files[0].path)
            mapped = self._open(self.meta, self.part, path, mmap=True, deep=False)
            self.csc_by_type = mapped.csc_by_type
            self.halo, self.halo_attrs = mapped.halo, mapped.halo_attrs
            self._advise()

    # ---- partition books -------------------------------------------------------
    @property
    def is_hetero(self) -> bool:
        if self.is_partitioned:
            return self.meta.is_hetero
        if isinstance(self.meta, dict) and "is_hetero" in self.meta:
            return bool(self.meta["is_hetero"])
        return any(attr.edge_type is not None for attr in self.memory.all_attrs())

    @property
    def num_parts(self) -> int:
        return self.num_partitions

    def node_book(self, node_type: Optional[NodeType] = None) -> RangeBook:
        """The partition book of a node type (``None`` for homogeneous graphs)."""
        return self._node_books[self.meta.node_type(node_type)]

    def edge_book(self, edge_type: Optional[EdgeType] = None) -> RangeBook:
        """The partition book of an edge type (``None`` for homogeneous graphs)."""
        return self._edge_books[self.meta.edge_type(edge_type)]

    def owned_nodes(self, node_type: Optional[NodeType] = None) -> Tensor:
        """Global ids of the nodes this partition owns."""
        book = self.node_book(node_type)
        return torch.arange(book.start(self.part), book.start(self.part) + book.size(self.part))

    # ---- GraphStore interface (original ids) ---------------------------------------
    def _pyg_type(self, edge_type: EdgeType) -> Optional[EdgeType]:
        """The edge type as PyG names it (``None`` for a homogeneous graph)."""
        return edge_type if self.is_hetero else None

    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        """The partition's edge types, each in COO layout over original node ids (as
        PyG's partition stores report them; ``get_edge_index`` of one gives ``(src,
        dst)`` in original edge id order, ``is_sorted=False``; size: all nodes of the
        source and destination types), then edges put by the user, in the order put."""
        types = self.meta.edge_types if self.is_partitioned else ()
        attrs = [EdgeAttr(self._pyg_type(et), EdgeLayout.COO, False,
                          (self.meta.num_nodes[et[0]], self.meta.num_nodes[et[2]]))
                 for et in types]
        return attrs + self.memory.all_attrs()

    def _put_edge_index(self, edge_index: EdgeTensorType, edge_attr: EdgeAttr) -> bool:
        edge_type = self._partition_type(edge_attr)
        if edge_type is not None:
            raise ValueError(f"edge type {edge_type} is part of the partition and read-only")
        self.memory.put(edge_index, edge_attr)
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[EdgeTensorType]:
        """Stored edges in original ids.

        ``COO`` gives original ``(src, dst)`` ordered by original edge id, as one
        ``[2, num_edges]`` tensor (as PyG's stores give it; ``src, dst = ...`` works);
        ``CSC`` gives ``(row, colptr)``: ``colptr`` over every original destination id of
        the type, each column's sources in original edge id order; ``CSR`` likewise by
        source.
        The original edge id of each position is in the third output of :meth:`coo`,
        :meth:`csc`, :meth:`csr`.
        """
        edge_type = self._partition_type(edge_attr)
        if edge_type is None:
            return self.memory.get(edge_attr)
        first, second, _ = self.original_layout(edge_type, edge_attr.layout)
        if EdgeLayout(edge_attr.layout) == EdgeLayout.COO:  # PyG's stores give [2, E]
            return torch.stack([first, second])
        return first, second

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        if self._partition_type(edge_attr) is not None:
            raise ValueError(f"edge type {edge_attr.edge_type!r} is part of the partition "
                             f"and read-only")
        return self.memory.remove(edge_attr)

    def original_coo(self, edge_type: Optional[EdgeType] = None) -> Tuple[Tensor, Tensor, Tensor]:
        """Original ``(src, dst, edge id)`` of every stored edge of ``edge_type``,
        ordered by original edge id (O(stored edges) memory, built per call)."""
        edge_type = self.meta.edge_type(edge_type)
        csc = self.csc_by_type[edge_type]
        src, dst = csc.coo()
        eid = self.id_tables.owned("edge", edge_type, self.part).ids
        eid, order = torch.sort(torch.as_tensor(eid).long())
        src = self.id_tables.to_original("node", edge_type[0], src[order])
        dst = self.id_tables.to_original("node", edge_type[2], dst[order])
        return src, dst, eid

    def original_layout(self, edge_type: EdgeType, layout: Union[EdgeLayout, str]
                        ) -> Tuple[Tensor, Tensor, Tensor]:
        """The stored edges of ``edge_type`` in original ids, in PyG's conversion output
        form: ``COO`` gives ``(src, dst, edge id)``; ``CSC`` gives ``(row, colptr,
        edge id per position)``; ``CSR`` gives ``(rowptr, col, edge id per position)``.
        Within a column (row) edges keep original edge id order."""
        layout = EdgeLayout(layout)
        if layout == EdgeLayout.CSC and self._stored_is_original(edge_type):
            csc = self.csc_by_type[edge_type]  # the structure mapped as stored: no copy
            eid = self.id_tables.owned("edge", edge_type, self.part).ids
            return csc.indices, csc.indptr, eid.long()  # int64 edge ids, as PyG's e_id
        src, dst, eid = self.original_coo(edge_type)
        if layout == EdgeLayout.COO:
            return src, dst, eid
        if layout == EdgeLayout.CSC:
            dst, order = torch.sort(dst, stable=True)
            colptr = _ptr(dst, self.meta.num_nodes[edge_type[2]])
            return src[order], colptr, eid[order]
        src, order = torch.sort(src, stable=True)
        return _ptr(src, self.meta.num_nodes[edge_type[0]]), dst[order], eid[order]

    def _stored_is_original(self, edge_type: EdgeType) -> bool:
        """Whether the stored CSC already is the original-id CSC: the partition owns
        every node of both end types, in original order (a one-partition folder), and
        each column lists its edges in original edge id order. Checked once per type
        (reads the id files; 1 byte per edge held while checking)."""
        if edge_type not in self._stored_original:
            self._stored_original[edge_type] = self._check_stored_original(edge_type)
        return self._stored_original[edge_type]

    def _check_stored_original(self, edge_type: EdgeType) -> bool:
        for node_type in (edge_type[0], edge_type[2]):
            ids = self.id_tables.owned("node", node_type, self.part).ids
            if ids.numel() != self.meta.num_nodes[node_type] or \
                    not torch.equal(ids, torch.arange(ids.numel())):
                return False
        csc = self.csc_by_type[edge_type]
        eid = self.id_tables.owned("edge", edge_type, self.part).ids
        if eid.numel() < 2:
            return True
        rising = eid[1:] > eid[:-1]
        starts = csc.indptr[1:-1]
        rising[starts[(starts > 0) & (starts < eid.numel())] - 1] = True  # column starts
        return bool(rising.all())

    def coo(self, edge_types: Optional[List[Any]] = None, store: bool = False
            ) -> ConversionOutputType:
        """PyG's :meth:`GraphStore.coo`, in original ids, with the original edge id of
        each position as the permutation."""
        return self._convert(EdgeLayout.COO, edge_types, store)

    def csc(self, edge_types: Optional[List[Any]] = None, store: bool = False
            ) -> ConversionOutputType:
        """PyG's :meth:`GraphStore.csc` (what PyG's ``NeighborSampler`` reads), in
        original ids, with the original edge id of each position as the permutation."""
        return self._convert(EdgeLayout.CSC, edge_types, store)

    def csr(self, edge_types: Optional[List[Any]] = None, store: bool = False
            ) -> ConversionOutputType:
        """PyG's :meth:`GraphStore.csr`, in original ids, with the original edge id of
        each position as the permutation."""
        return self._convert(EdgeLayout.CSR, edge_types, store)

    def _convert(self, layout: EdgeLayout, edge_types: Optional[List[Any]],
                 store: bool) -> ConversionOutputType:
        """One conversion for every edge type. Partition edge types are computed views
        (``store=True`` caches nothing for them); edges put by the user convert as PyG
        converts them (all of a store in memory: PyG's own conversion)."""
        if not self.is_partitioned:
            return self._edges_to_layout(layout, edge_types, store)
        attrs: Dict[Optional[EdgeType], EdgeAttr] = {}
        for attr in self.get_all_edge_attrs():
            attrs.setdefault(attr.edge_type, attr)
        if edge_types is not None and self.is_hetero:
            wanted = [edge_type_of(t) for t in edge_types]
            for edge_type in wanted:
                if edge_type not in attrs:
                    raise ValueError(f"edge_types: the 'edge_index' of type {edge_type} "
                                     f"was not found in the graph store")
            attrs = {k: v for k, v in attrs.items() if k in wanted}
        out: Dict[Optional[EdgeType], Tuple[Tensor, Tensor, OptTensor]] = {}
        for key, attr in attrs.items():
            edge_type = edge_type_of(key)
            if edge_type in self.csc_by_type:
                out[key] = self.original_layout(edge_type, layout)
            else:
                out[key] = self._edge_to_layout(attr, layout, store)
        if not self.is_hetero:
            return out[None]
        return ({k: v[0] for k, v in out.items()}, {k: v[1] for k, v in out.items()},
                {k: v[2] for k, v in out.items()})

    def share_memory_(self) -> "LocalGraphStore":
        """Moves the stored tensors to shared memory (for sampler worker processes); a
        mapped store's tensors are shared already (workers map the same file)."""
        if self.source is None:
            for csc in self.csc_by_type.values():
                csc.indptr.share_memory_()
                csc.indices.share_memory_()
        return self

    def __repr__(self) -> str:
        if not self.is_partitioned:
            return f"LocalGraphStore(in memory, edges={self.memory.all_attrs()})"
        edges = sum(c.num_edges for c in self.csc_by_type.values())
        return (f"LocalGraphStore(part={self.part}/{self.num_parts}, "
                f"edge_types={len(self.csc_by_type)}, edges={edges})")


def _ptr(sorted_index: Tensor, size: int) -> Tensor:
    """Compressed pointer (length ``size + 1``) of a sorted index vector."""
    ptr = torch.zeros(size + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(sorted_index, minlength=size), 0, out=ptr[1:])
    return ptr
