"""``torch_geometric.distributed``'s ``LocalGraphStore`` methods, in pyg_dist's meaning.

Edge ids are the dataset's original edge ids. For the edge types of a partition,
``get_edge_id(edge_type, layout)`` gives the original edge id of every position of
``get_edge_index(edge_type, layout)``; edges put by the user keep the ids put with
``put_edge_id``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr

from pyg_dist.store._from_tensors import MemoryEdges, edge_group
from pyg_dist.store._pyg_surface import PartitionAttributes
from pyg_dist._typing import EdgeType, NodeType, edge_type_of


class EdgeIndexView(Mapping):
    """``torch_geometric.distributed``'s ``LocalGraphStore._edge_index``, read-only:
    ``view[(edge_type, layout)]`` is ``graph_store.get_edge_index(edge_type,
    layout=layout)`` (original ids; ``edge_type`` is ``None`` for a homogeneous graph),
    so scripts that read PyG's dict keep working. Edges are added with
    ``put_edge_index``, never through this view.

    Args:
        store: the graph store it reads.
    """

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getitem__(self, key: Tuple[Any, Any]) -> Any:
        if not isinstance(key, tuple) or len(key) != 2:
            raise KeyError(f"_edge_index keys are (edge_type, layout), got {key!r}")
        edge_type, layout = key
        return self._store.get_edge_index(edge_type=edge_type, layout=layout)

    def __iter__(self) -> Iterator[Tuple[Any, str]]:
        return iter([(a.edge_type, a.layout.value) for a in self._store.get_all_edge_attrs()])

    def __len__(self) -> int:
        return len(self._store.get_all_edge_attrs())


class PygGraphApi(PartitionAttributes):
    """PyG's ``LocalGraphStore`` surface over pyg_dist's store (a mixin of
    :class:`~pyg_dist.store.LocalGraphStore`)."""

    memory: MemoryEdges
    csc_by_type: Dict[EdgeType, Any]

    @property
    def _edge_index(self) -> EdgeIndexView:
        """PyG's ``_edge_index`` dict, read-only (:class:`EdgeIndexView`)."""
        return EdgeIndexView(self)

    def _partition_type(self, attr: EdgeAttr) -> Optional[EdgeType]:
        """The partition's edge type ``attr`` names, or ``None`` (edges put by the user)."""
        if not self.is_partitioned:
            return None
        edge_type = edge_type_of(attr.edge_type)
        return edge_type if edge_type in self.csc_by_type else None

    def put_edge_id(self, edge_id: Tensor, *args: Any, **kwargs: Any) -> bool:
        """Sets the edge id of every position of the edges put under the same
        ``(edge_type, layout)`` (a partition's edge ids come from its id files)."""
        attr = self._edge_attr_cls.cast(*args, **kwargs)
        if self._partition_type(attr) is not None:
            raise ValueError(f"edge type {attr.edge_type!r} is part of the partition: its "
                             f"edge ids come from its id files and cannot be changed")
        self.memory.put_id(edge_id, attr)
        return True

    def get_edge_id(self, *args: Any, **kwargs: Any) -> Optional[Tensor]:
        """The original edge id of every position of ``get_edge_index`` with the same
        arguments (``None`` where none were put)."""
        attr = self._edge_attr_cls.cast(*args, **kwargs)
        edge_type = self._partition_type(attr)
        if edge_type is not None:
            return self.original_layout(edge_type, attr.layout)[2]
        return self.memory.get_id(attr)

    def remove_edge_id(self, *args: Any, **kwargs: Any) -> bool:
        """Forgets the edge ids put under ``(edge_type, layout)``."""
        attr = self._edge_attr_cls.cast(*args, **kwargs)
        if self._partition_type(attr) is not None:
            raise ValueError(f"edge type {attr.edge_type!r} is part of the partition: its "
                             f"edge ids come from its id files and cannot be removed")
        return self.memory.remove_id(attr)

    @property
    def is_sorted(self) -> Optional[bool]:
        """PyG's flag: whether the partition's edges are sorted by destination as
        ``get_edge_index(..., layout='coo')`` gives them. ``False`` for a partition (its
        COO view is in original edge id order; ``csc()`` gives them by destination);
        for a store in memory, what was set (``None`` at first, as PyG)."""
        return self._pyg_value("is_sorted", lambda: False)

    @is_sorted.setter
    def is_sorted(self, value: Optional[bool]) -> None:
        self._set_pyg_value("is_sorted", value)

    # ---- building in memory --------------------------------------------------------
    @classmethod
    def from_data(cls, edge_id: Optional[Tensor], edge_index: Tensor, num_nodes: int,
                  is_sorted: bool = False) -> Any:
        """A store in memory holding a homogeneous graph's edges, as PyG's.

        Args:
            edge_id (Tensor, optional): the original id of every edge.
            edge_index (Tensor): the edges (``[2, E]``, original node ids).
            num_nodes (int): the number of nodes.
            is_sorted (bool): whether the edges are sorted by destination already
                (else they are sorted, ``edge_id`` alongside).
        """
        store = cls()
        store.meta = {"is_hetero": False}
        store._put_coo(None, edge_index, edge_id, (num_nodes, num_nodes), is_sorted)
        return store

    @classmethod
    def from_hetero_data(cls, edge_id_dict: Dict[EdgeType, Optional[Tensor]],
                         edge_index_dict: Dict[EdgeType, Tensor],
                         num_nodes_dict: Dict[NodeType, int], is_sorted: bool = False) -> Any:
        """A store in memory holding a heterogeneous graph's edges, as PyG's (the dicts
        of :meth:`from_data`'s arguments by edge type, node counts by node type)."""
        store = cls()
        store.meta = {"is_hetero": True}
        for edge_type, edge_index in edge_index_dict.items():
            src, _, dst = edge_type
            store._put_coo(edge_type, edge_index, edge_id_dict.get(edge_type),
                           (num_nodes_dict[src], num_nodes_dict[dst]), is_sorted)
        return store

    def _put_coo(self, edge_type: Optional[EdgeType], edge_index: Tensor,
                 edge_id: Optional[Tensor], size: Tuple[int, int], is_sorted: bool) -> None:
        """Puts COO edges sorted by destination (sorting them unless ``is_sorted``):
        a stable sort, so the edges into one node keep the order they were given in,
        as PyG's ``to_csc`` keeps them (and with them the order a full fan-out lists
        neighbours in)."""
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or \
                edge_index.size(0) != 2:
            got = tuple(edge_index.shape) if isinstance(edge_index, Tensor) else \
                type(edge_index).__name__
            raise ValueError(f"edge_index of {edge_type!r} must be a [2, num_edges] tensor, "
                             f"got {got}")
        if edge_id is not None and edge_id.numel() != edge_index.size(1):
            raise ValueError(f"edge_id of {edge_type!r} has {edge_id.numel()} ids for "
                             f"{edge_index.size(1)} edges")
        if not is_sorted:
            perm = torch.sort(edge_index[1], stable=True).indices
            edge_index = edge_index[:, perm]
            edge_id = None if edge_id is None else edge_id[perm]
        attr = EdgeAttr(edge_group(edge_type), "coo", True, size)
        self.put_edge_index(edge_index, attr)
        if edge_id is not None:
            self.put_edge_id(edge_id, attr)

