"""``torch_geometric.distributed``'s public store attributes, in pyg_dist's meaning.

Global ids are the dataset's original ids (what PyG's partitioner kept as
``global_id``). For a store opened from a partition folder the partition attributes
(``num_partitions``, ``partition_idx``, the partition books, ``meta``) come from the
folder and are read-only; for a store built in memory (``LocalFeatureStore()``,
``from_data``) they are plain attributes, settable as in PyG.

The partition books (:class:`OriginalBook`) answer "which partition owns original id
``i``" without a table over the whole graph: they look ids up in the partitions' id
files (``part_<p>/node_ids.pt`` / ``edge_ids.pt``), which must be readable from this
process (a shared or copied partition folder).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.store._original_ids import PartitionIds, check_ids
from pyg_dist._typing import EdgeType, NodeType, edge_key

Book = Union["OriginalBook", Dict[Any, "OriginalBook"], Tensor, None]

_DEFAULTS = {"num_partitions": 1, "partition_idx": 0, "node_pb": None, "edge_pb": None,
             "is_sorted": None}


class OriginalBook:
    """The owning partition of original node (edge) ids of one type, as PyG's partition
    book tensors answer ``book[ids]``.

    Args:
        ids (PartitionIds): the partitions' id files.
        kind (str): ``"node"`` or ``"edge"``.
        group: the node or edge type (pyg_dist's name).
    """

    def __init__(self, ids: PartitionIds, kind: str, group: Union[NodeType, EdgeType]) -> None:
        self.ids, self.kind, self.group = ids, kind, group
        meta = ids.meta
        self.total = meta.num_nodes[group] if kind == "node" else meta.num_edges[group]

    def __getitem__(self, index: Any) -> Tensor:
        """Partition of every original id in ``index`` (an integer tensor or a slice)."""
        if isinstance(index, slice):
            index = torch.arange(self.total)[index]
        what = f"node type '{self.group}'" if self.kind == "node" else \
            f"edge type {edge_key(self.group)}"
        ids = check_ids(index, self.total, "index", what)
        queries, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        owner = torch.full_like(queries, -1)
        for part in range(self.ids.meta.num_parts):
            found = self.ids.owned(self.kind, self.group, part).find(queries) >= 0
            owner[found] = part
        return owner[inverse].reshape(ids.shape)

    def __len__(self) -> int:
        return self.total

    def numel(self) -> int:
        return self.total

    def to_tensor(self) -> Tensor:
        """The whole book as a tensor (one entry per id of the type: memory of the
        whole graph's size, as PyG held it)."""
        return self[torch.arange(self.total)]

    def tolist(self) -> list:
        """The whole book as a list, as a PyG book tensor's ``tolist()`` (the size of
        the whole graph: see :meth:`to_tensor`)."""
        return self.to_tensor().tolist()

    def __repr__(self) -> str:
        return f"OriginalBook({self.kind}, {self.group!r}, ids={self.total})"


def original_books(ids: PartitionIds, kind: str) -> Book:
    """PyG's partition book of a kind: one book (homogeneous graph), or a dict by type."""
    meta: PartitionMeta = ids.meta
    types = meta.node_types if kind == "node" else meta.edge_types
    books = {t: OriginalBook(ids, kind, t) for t in types}
    return books if meta.is_hetero else books[types[0]]


class PartitionAttributes:
    """``num_partitions``, ``partition_idx`` and the partition books of PyG's stores.

    A store using it has ``meta`` (a :class:`PartitionMeta` when opened from a
    partition folder), ``part`` and ``id_tables``; PyG names the books ``node_pb`` /
    ``edge_pb`` in its graph store and ``node_feat_pb`` / ``edge_feat_pb`` in its
    feature store (both names work on both stores here).
    """

    meta: Any
    part: int
    id_tables: PartitionIds

    @property
    def is_partitioned(self) -> bool:
        """Whether the store was opened from a partition folder (else built in memory)."""
        return isinstance(self.meta, PartitionMeta)

    def _pyg_value(self, name: str, from_partition: Any) -> Any:
        if self.is_partitioned:
            return from_partition()
        return self.__dict__.setdefault("_pyg_info", dict(_DEFAULTS))[name]

    def _set_pyg_value(self, name: str, value: Any) -> None:
        if self.is_partitioned:
            raise AttributeError(f"{name} of a store opened from a partition folder comes "
                                 f"from the folder and cannot be set")
        self.__dict__.setdefault("_pyg_info", dict(_DEFAULTS))[name] = value

    @property
    def num_partitions(self) -> int:
        """The number of partitions (PyG's name; also ``meta.num_parts``)."""
        return self._pyg_value("num_partitions", lambda: self.meta.num_parts)

    @num_partitions.setter
    def num_partitions(self, value: int) -> None:
        self._set_pyg_value("num_partitions", value)

    @property
    def partition_idx(self) -> int:
        """The partition this store holds (PyG's name; also ``part``)."""
        return self._pyg_value("partition_idx", lambda: self.part)

    @partition_idx.setter
    def partition_idx(self, value: int) -> None:
        self._set_pyg_value("partition_idx", value)

    @property
    def node_pb(self) -> Book:
        """Partition of each original node id: ``node_pb[ids]`` (a dict by node type
        for heterogeneous graphs); see :class:`OriginalBook`."""
        return self._pyg_value("node_pb", lambda: original_books(self.id_tables, "node"))

    @node_pb.setter
    def node_pb(self, value: Book) -> None:
        self._set_pyg_value("node_pb", value)

    @property
    def edge_pb(self) -> Book:
        """Partition of each original edge id: ``edge_pb[ids]`` (a dict by edge type
        for heterogeneous graphs); see :class:`OriginalBook`."""
        return self._pyg_value("edge_pb", lambda: original_books(self.id_tables, "edge"))

    @edge_pb.setter
    def edge_pb(self, value: Book) -> None:
        self._set_pyg_value("edge_pb", value)

    node_feat_pb = node_pb
    edge_feat_pb = edge_pb

    def get_partition_ids_from_nids(self, ids: Tensor,
                                    node_type: Optional[NodeType] = None) -> Tensor:
        """Partition of original node ids ``ids`` (of ``node_type``)."""
        book = self.node_pb
        return (book[node_type] if isinstance(book, dict) else book)[ids]

    def get_partition_ids_from_eids(self, eids: Tensor,
                                    edge_type: Optional[EdgeType] = None) -> Tensor:
        """Partition of original edge ids ``eids`` (of ``edge_type``)."""
        book = self.edge_pb
        return (book[tuple(edge_type)] if isinstance(book, dict) else book)[eids]
