"""``LocalGraphStore``: one partition's edges, as a PyG ``GraphStore``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.typing import EdgeTensorType

from pyg_dist.partition import io
from pyg_dist.partition.book import RangeBook
from pyg_dist.partition.manifest import check_files
from pyg_dist.partition.meta import PartitionMeta
from pyg_dist.partition.validate import check_graph, check_uid
from pyg_dist.store.source import FileId, PartitionSource, advise_rows
from pyg_dist.typing import EdgeType, NodeType, edge_type_of


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


class LocalGraphStore(GraphStore):
    """The in-edges (CSC by destination, global ids) of the nodes one partition owns.

    Sources owned by other partitions are this partition's *halo* nodes. Memory is
    O(partition + halo): the only whole-graph state is the partition book.

    Args:
        meta (PartitionMeta): the description of the whole partitioned graph.
        part (int): the partition this store holds.
        csc (Dict[EdgeType, CSC]): the stored edges per edge type.
        halo (Dict[NodeType, Tensor]): sorted global ids of halo nodes per type.
        halo_attrs (Dict[NodeType, Dict[str, Tensor]]): node attributes (e.g. ``time``)
            of those halo nodes, row-aligned with ``halo``.
    """

    def __init__(self, meta: PartitionMeta, part: int, csc: Dict[EdgeType, CSC],
                 halo: Optional[Dict[NodeType, Tensor]] = None,
                 halo_attrs: Optional[Dict[NodeType, Dict[str, Tensor]]] = None) -> None:
        super().__init__()
        self.meta = meta
        self.part = part
        self.csc = csc
        self.halo = halo or {}
        self.halo_attrs = halo_attrs or {}
        self._extra: Dict[Tuple[EdgeType, EdgeLayout], EdgeTensorType] = {}
        self._node_books = {t: meta.node_book(t) for t in meta.node_types}
        self._edge_books = {t: meta.edge_book(t) for t in meta.edge_types}
        #: the mapped ``graph.pt`` (``None``: tensors held in this process's memory)
        self.source: Optional[PartitionSource] = None

    @classmethod
    def from_partition(cls, root: Union[str, Path], pid: int, mmap: bool = True,
                       verify: bool = False) -> "LocalGraphStore":
        """Opens partition ``pid`` of the partition folder ``root``.

        Everything loaded is checked first (:func:`~pyg_dist.partition.validate.check_graph`):
        structure, dtypes, monotonic ``indptr``, and that the partition has the ``uid``
        of ``META.json``; with ``mmap=False`` also every source id (with ``mmap=True``
        samplers check the ids they read). ``graph.pt`` must have the size its
        ``MANIFEST.json`` records and, when it is read in full (``mmap=False`` or
        ``verify=True``), its digest (:mod:`pyg_dist.partition.manifest`).

        Args:
            root (str or Path): the partition folder.
            pid (int): the partition.
            mmap (bool): map ``graph.pt`` read-only (default): opening is constant time
                and every process on the machine shares one copy in the page cache.
                ``False`` reads it into this process's memory.
            verify (bool): also check the digest of a mapped ``graph.pt`` (reads it
                once; default ``False`` keeps a mapped open constant-time).

        Raises:
            PartitionFormatError: naming the file and the problem
                (:class:`~pyg_dist.partition.manifest.PartitionDigestError` when its
                bytes differ from the digest recorded at write time).
            TypeError: ``root``, ``pid``, ``mmap`` or ``verify`` of the wrong type.
        """
        root, pid = io.check_open_args(root, pid, mmap=mmap, verify=verify)
        meta = io.read_meta(root)
        path = io.check_part(root, meta, pid) / io.GRAPH_FILE
        check_uid(path, io.read_uid(path.parent), meta)  # another run's partition: say so
        full = (io.GRAPH_FILE,) if verify or not mmap else ()
        check_files(path.parent, meta, pid, (io.GRAPH_FILE,), full)
        source = PartitionSource(str(Path(root).absolute()), pid, (FileId.of(path),))
        store = cls._open(meta, pid, path, mmap, deep=not mmap)
        if mmap:
            source.check_unchanged()  # the file mapped is the one identified
            store.source = source
            store._advise()
        return store

    def _advise(self) -> None:
        """Neighbour lists are read at random (see :func:`advise_rows`)."""
        advise_rows(t for csc in self.csc.values() for t in (csc.indptr, csc.indices))

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
            state.update(csc=None, halo=None, halo_attrs=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.source is not None:
            self.source.check_unchanged()
            path = Path(self.source.files[0].path)
            mapped = self._open(self.meta, self.part, path, mmap=True, deep=False)
            self.csc, self.halo, self.halo_attrs = mapped.csc, mapped.halo, mapped.halo_attrs
            self._advise()

    # ---- partition books -------------------------------------------------------
    @property
    def is_hetero(self) -> bool:
        return self.meta.is_hetero

    @property
    def num_parts(self) -> int:
        return self.meta.num_parts

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

    # ---- GraphStore interface --------------------------------------------------
    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        attrs = [EdgeAttr(et, EdgeLayout.CSC, True,
                          (self.meta.num_nodes[et[0]], self.csc[et].num_dst))
                 for et in self.meta.edge_types]
        attrs += [EdgeAttr(et, layout) for (et, layout) in self._extra]
        return attrs

    def _put_edge_index(self, edge_index: EdgeTensorType, edge_attr: EdgeAttr) -> bool:
        key = (edge_type_of(edge_attr.edge_type), EdgeLayout(edge_attr.layout))
        if key[0] in self.csc:
            raise ValueError(f"edge type {key[0]} is part of the partition and read-only")
        self._extra[key] = edge_index
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[EdgeTensorType]:
        """Stored edges with global ids.

        ``CSC`` gives ``(row, colptr)`` where ``row`` holds global source ids and
        column ``j`` is global destination ``node_offsets[part] + j``; ``COO`` gives
        global ``(src, dst)``. Both list edges in global edge id order.
        """
        edge_type = edge_type_of(edge_attr.edge_type)
        layout = EdgeLayout(edge_attr.layout)
        if (edge_type, layout) in self._extra:
            return self._extra[(edge_type, layout)]
        if edge_type not in self.csc:
            return None
        csc = self.csc[edge_type]
        if layout == EdgeLayout.CSC:
            return csc.indices, csc.indptr
        if layout == EdgeLayout.COO:
            return csc.coo()
        raise NotImplementedError("LocalGraphStore stores in-edges (CSC); a CSR view of a "
                                  "partition would need the out-edges of halo nodes")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        key = (edge_type_of(edge_attr.edge_type), EdgeLayout(edge_attr.layout))
        return self._extra.pop(key, None) is not None

    def share_memory_(self) -> "LocalGraphStore":
        """Moves the stored tensors to shared memory (for sampler worker processes); a
        mapped store's tensors are shared already (workers map the same file)."""
        if self.source is None:
            for csc in self.csc.values():
                csc.indptr.share_memory_()
                csc.indices.share_memory_()
        return self

    def __repr__(self) -> str:
        edges = sum(c.num_edges for c in self.csc.values())
        return (f"LocalGraphStore(part={self.part}/{self.num_parts}, "
                f"edge_types={len(self.csc)}, edges={edges})")
