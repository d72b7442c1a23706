"""Stores built in memory, as ``torch_geometric.distributed``'s are: ``LocalFeatureStore()``,
``LocalGraphStore()``, ``from_data`` and ``from_hetero_data``.

Such a store has no partition folder behind it: it holds what is put, keyed by PyG's
group names (``None`` for a homogeneous graph's nodes, ``(None, None)`` for its edges,
a node type or an edge type otherwise), in the order it was put. The ids rule of
pyg_dist still holds: ``get_tensor(index=...)`` takes the dataset's original ids. The
original id of each row is what :meth:`MemoryFeatures.put_global_id` gave for its group;
a group without them has never been relabelled (row ``i`` is id ``i``).

:class:`MemoryFeatures` backs a feature store built in memory; :class:`MemoryEdges` backs
a graph store built in memory, and holds the edges a user puts beside a partition's.
"""
from __future__ import annotations

from typing import Any, Dict, Hashable, List, Optional, Set, Tuple

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.typing import EdgeTensorType

from pyg_dist.store._original_ids import OwnedIds, check_ids, take_rows
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, PYG_HOMO_EDGE, is_homo_alias, parse_edge_key

Key = Tuple[Hashable, str]


def feature_group(group: Any) -> Hashable:
    """PyG's name of a feature group: ``None`` for a homogeneous graph's nodes
    (pyg_dist's ``"_N"`` too), ``(None, None)`` for its edges (``("_N", "_E", "_N")``
    too), edge types as tuples (``"src__rel__dst"`` too), node types as they are."""
    if group is None or group == HOMO_NODE:
        return None
    if isinstance(group, str) and "__" in group:
        group = parse_edge_key(group)
    if isinstance(group, (tuple, list)):
        group = tuple(group)
        return PYG_HOMO_EDGE if is_homo_alias(group) or group == HOMO_EDGE else group
    return group


def edge_group(edge_type: Any) -> Optional[Tuple[str, str, str]]:
    """PyG's name of an edge type in a graph store: ``None`` for a homogeneous graph."""
    group = feature_group(edge_type)
    return None if group is None or group == PYG_HOMO_EDGE else group


def check_global_ids(global_id: Any, group: Hashable) -> Tensor:
    """``global_id`` as a 1-D int64 tensor of distinct non-negative ids, else a one-line
    error naming ``global_id``."""
    if not isinstance(global_id, Tensor) or global_id.dim() != 1 or \
            global_id.dtype.is_floating_point or global_id.dtype == torch.bool:
        got = tuple(global_id.shape) if isinstance(global_id, Tensor) else type(global_id)
        raise TypeError(f"global_id of group {group!r} must be a 1-D integer tensor, got "
                        f"{got}")
    ids = global_id.long()
    if ids.numel() and int(ids.min()) < 0:
        raise ValueError(f"global_id of group {group!r} holds a negative id "
                         f"({int(ids.min())})")
    if torch.unique(ids).numel() != ids.numel():
        raise ValueError(f"global_id of group {group!r} holds an id twice: each row needs "
                         f"its own id")
    return ids


class MemoryFeatures:
    """Attributes put in memory, by ``(group, attribute)`` in the order put, with the
    original id of every row of a group (:meth:`put_global_id`).

    A tensor put whole for a group with global ids has one row per id, in their order;
    one with another number of rows is a *whole-graph* attribute (:attr:`whole`): one
    row per node of the type, in original id order, as PyG keeps a node ``time`` for
    every node in every partition (``index`` then takes any original id)."""

    def __init__(self) -> None:
        self.tensors: Dict[Key, Tensor] = {}
        self.global_ids: Dict[Hashable, OwnedIds] = {}
        #: the attributes held for every node (edge), indexed by original id
        self.whole: Set[Key] = set()

    def rows(self, group: Hashable, attr_name: str, index: Any) -> Tensor:
        """Rows of original ids ``index`` (a tensor or a slice) of ``group``."""
        owned = self.global_ids.get(group)
        if owned is None or (group, attr_name) in self.whole:  # id = row
            size = self.tensors[(group, attr_name)].size(0)
            if isinstance(index, slice):
                return torch.arange(size)[index]
            return check_ids(index, size, "index", f"group {group!r}")
        if isinstance(index, slice):
            index = torch.arange(owned.total)[index]
        return owned.to_rows(index, "index")

    def put(self, tensor: Tensor, group: Hashable, attr_name: str, index: Any) -> None:
        """Stores ``tensor`` whole (``index=None``) or writes the rows of ids ``index``."""
        key = (group, attr_name)
        if index is None:
            if not isinstance(tensor, Tensor) or tensor.dim() == 0:
                raise ValueError(f"'{attr_name}' of group {group!r} must be a tensor with "
                                 f"one row per id, got {type(tensor).__name__}")
            owned = self.global_ids.get(group)
            self.whole.discard(key)
            if owned is not None and tensor.size(0) != owned.num_owned:
                self.whole.add(key)  # one row per node (edge) of the graph, by id
            self.tensors[key] = tensor
            return
        if key not in self.tensors:
            raise KeyError(f"cannot write rows of unknown attribute '{attr_name}' of group "
                           f"{group!r}; put the whole tensor first (index=None)")
        self.tensors[key][self.rows(group, attr_name, index)] = tensor

    def get(self, group: Hashable, attr_name: str, index: Any) -> Optional[Tensor]:
        """The stored tensor (``index=None``) or the rows of ids ``index``."""
        tensor = self.tensors.get((group, attr_name))
        if tensor is None or index is None:
            return tensor
        return take_rows(tensor, self.rows(group, attr_name, index))

    def remove(self, group: Hashable, attr_name: str) -> bool:
        self.whole.discard((group, attr_name))
        return self.tensors.pop((group, attr_name), None) is not None

    def keys(self) -> List[Key]:
        return list(self.tensors)

    def put_global_id(self, global_id: Tensor, group: Hashable) -> None:
        ids = check_global_ids(global_id, group)
        for (g, attr), tensor in self.tensors.items():
            if g == group and tensor.size(0) != ids.numel() and (g, attr) not in self.whole:
                raise ValueError(f"global_id of group {group!r} has {ids.numel()} ids but "
                                 f"'{attr}' has {tensor.size(0)} rows")
        total = int(ids.max()) + 1 if ids.numel() else 0
        self.global_ids[group] = OwnedIds(ids, 0, total, f"group {group!r}", 0)

    def get_global_id(self, group: Hashable) -> Optional[Tensor]:
        owned = self.global_ids.get(group)
        return None if owned is None else owned.ids

    def remove_global_id(self, group: Hashable) -> bool:
        return self.global_ids.pop(group, None) is not None


class MemoryEdges:
    """Edges put in memory, by ``(edge type, layout)`` in the order put, with the edge
    id of every position (:meth:`put_id`)."""

    def __init__(self) -> None:
        self.index: Dict[Tuple[Any, str], EdgeTensorType] = {}
        self.attrs: Dict[Tuple[Any, str], EdgeAttr] = {}
        self.ids: Dict[Tuple[Any, str], Tensor] = {}

    @staticmethod
    def key(attr: EdgeAttr) -> Tuple[Any, str]:
        return edge_group(attr.edge_type), EdgeLayout(attr.layout).value

    def put(self, edge_index: EdgeTensorType, attr: EdgeAttr) -> None:
        key = self.key(attr)
        self.index[key] = edge_index
        self.attrs[key] = EdgeAttr(key[0], EdgeLayout(key[1]), attr.is_sorted, attr.size)

    def get(self, attr: EdgeAttr) -> Optional[EdgeTensorType]:
        return self.index.get(self.key(attr))

    def remove(self, attr: EdgeAttr) -> bool:
        self.attrs.pop(self.key(attr), None)
        return self.index.pop(self.key(attr), None) is not None

    def all_attrs(self) -> List[EdgeAttr]:
        return [self.attrs[key] for key in self.index]

    def put_id(self, edge_id: Tensor, attr: EdgeAttr) -> None:
        self.ids[self.key(attr)] = edge_id

    def get_id(self, attr: EdgeAttr) -> Optional[Tensor]:
        return self.ids.get(self.key(attr))

    def remove_id(self, attr: EdgeAttr) -> bool:
        return self.ids.pop(self.key(attr), None) is not None
