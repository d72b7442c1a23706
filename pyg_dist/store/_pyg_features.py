"""``torch_geometric.distributed``'s ``LocalFeatureStore`` methods, in pyg_dist's meaning.

Global ids are the dataset's original ids. ``get_tensor(index=...)`` takes them too,
unlike PyG's store (which took partition-local rows): :meth:`get_tensor_from_global_id`
is the explicit name, and rows of a partition are ``index=store.get_global_id(group)[rows]``
(see ``docs/migration.md``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import TensorAttr

from pyg_dist.store._from_tensors import MemoryFeatures, check_global_ids, feature_group
from pyg_dist.store._pyg_surface import PartitionAttributes
from pyg_dist._typing import PYG_HOMO_EDGE, EdgeType, NodeType, edge_key

Group = Union[NodeType, EdgeType]

#: the attributes PyG's partitioner stored, in the order its stores report them
PYG_NODE_ORDER = ("x", "time")
PYG_EDGE_ORDER = ("edge_attr", "edge_time")


_UNSET = TensorAttr.__dataclass_fields__["group_name"].default  # PyG's "not given"


@dataclass
class StoreAttr(TensorAttr):
    """A :class:`TensorAttr` whose ``index`` defaults to ``None`` (every owned row), so
    ``put_tensor(x, group_name=..., attr_name=...)`` works as in
    ``torch_geometric.distributed``."""

    def __init__(self, group_name: Any = _UNSET, attr_name: Any = _UNSET,
                 index: Any = None) -> None:
        super().__init__(group_name, attr_name, index)


class PygFeatureApi(PartitionAttributes):
    """PyG's ``LocalFeatureStore`` surface over pyg_dist's store (a mixin of
    :class:`~pyg_dist.store.LocalFeatureStore`)."""

    memory: Optional[MemoryFeatures]
    _tensors: Dict[Group, Dict[str, Tensor]]
    _labels: Optional[Tensor]

    # ---- global ids ----------------------------------------------------------------
    def get_global_id(self, group_name: Any) -> Optional[Tensor]:
        """The original id of every row of a node or edge group (``None`` / ``(None,
        None)``: a homogeneous graph's nodes / edges), row-aligned with ``get_tensor``
        without ``index``."""
        if self.memory is not None:
            return self.memory.get_global_id(feature_group(group_name))
        return self.owned_ids(self.resolve(group_name)).ids.long()

    def put_global_id(self, global_id: Tensor, group_name: Any) -> bool:
        """Sets the original id of every row of a group (a store built in memory; a
        partition's ids come from its id files: giving the same ids is accepted)."""
        if self.memory is not None:
            self.memory.put_global_id(global_id, feature_group(group_name))
            return True
        ids = check_global_ids(global_id, group_name)
        if not torch.equal(ids, self.get_global_id(group_name)):
            raise ValueError(f"the global ids of group {group_name!r} of partition "
                             f"{self.part} come from its id files and cannot be changed")
        return True

    def remove_global_id(self, group_name: Any) -> bool:
        """Forgets the global ids of a group of a store built in memory."""
        if self.memory is None:
            raise ValueError(f"the global ids of group {group_name!r} of partition "
                             f"{self.part} come from its id files and cannot be removed")
        return self.memory.remove_global_id(feature_group(group_name))

    def get_tensor_from_global_id(self, *args: Any, **kwargs: Any) -> Optional[Tensor]:
        """Rows of original (global) ids, as PyG's: ``get_tensor_from_global_id(
        group_name=..., attr_name=..., index=ids)``. ``get_tensor`` takes the same ids
        here; this name says so explicitly.

        Raises:
            ValueError: no ``index`` given, or ids not held by this store.
        """
        attr = self._tensor_attr_cls.cast(*args, **kwargs)
        if attr.index is None:
            raise ValueError("get_tensor_from_global_id needs index= (the global ids whose "
                             "rows to return)")
        return self.get_tensor(copy.copy(attr))

    # ---- attributes as PyG lists them ----------------------------------------------
    def pyg_attr_keys(self) -> List[Tuple[Any, str]]:
        """``(group, attribute)`` of every stored tensor: first those PyG's partitioner
        stored, in its order (``x``, ``time`` of every node type, then ``edge_attr``,
        ``edge_time`` of every edge type), then the others (``y``, masks, anything put)
        by group in stored order. Groups as PyG names them."""
        if self.memory is not None:
            return self.memory.keys()
        first: List[Tuple[Any, str]] = []
        for group, attrs in self._tensors.items():
            order = PYG_EDGE_ORDER if isinstance(group, tuple) else PYG_NODE_ORDER
            first += [(group, a) for a in order if a in attrs]
        nodes = [k for k in first if not isinstance(k[0], tuple)]
        first = nodes + [k for k in first if isinstance(k[0], tuple)]
        rest = [(g, a) for g, attrs in self._tensors.items() for a in attrs
                if (g, a) not in first]
        return [(self.pyg_group(g), a) for g, a in first + rest]

    def pyg_group(self, group: Group) -> Any:
        """A stored group as PyG names it (``None`` / ``(None, None)`` when homogeneous)."""
        if self.meta.is_hetero:
            return group
        return PYG_HOMO_EDGE if isinstance(group, tuple) else None

    @property
    def _global_id(self) -> Dict[Any, Tensor]:
        """Original ids of the owned nodes by node type (``None`` for a homogeneous
        graph), row-aligned with the stored tensors, as ``torch_geometric.distributed``'s
        store exposes them."""
        if self.memory is not None:
            return {g: ids.ids for g, ids in self.memory.global_ids.items()}
        return {self.pyg_group(t): self.owned_ids(t).ids.long() for t in self.meta.node_types}

    @property
    def _feat(self) -> Dict[Tuple[Any, str], Tensor]:
        """Stored tensors by ``(group, attribute)``, as ``torch_geometric.distributed``'s
        store exposes them (group ``None`` / ``(None, None)`` for a homogeneous graph)."""
        if self.memory is not None:
            return dict(self.memory.tensors)
        return {(self.pyg_group(g), a): t for g, attrs in self._tensors.items()
                for a, t in attrs.items()}

    # ---- labels ------------------------------------------------------------------
    @property
    def labels(self) -> Optional[Tensor]:
        """Labels as ``torch_geometric.distributed``'s scripts set them (``feature.labels =
        torch.load(label_file)``): one row per node of the seed type in the dataset's
        order (indexed by original id), or one row per node of it this partition owns
        (in the order of ``node_ids.pt``). Node batches then take ``y`` from it instead
        of a stored ``y``. One row per edge of an edge type is accepted and never read
        (PyG's link scripts store per-edge labels there; link loaders use
        ``edge_label``)."""
        return self._labels

    @labels.setter
    def labels(self, value: Optional[Tensor]) -> None:
        if value is not None and self.is_partitioned:
            counts = {t: (self.meta.num_nodes[t], self._books[t].size(self.part))
                      for t in self.meta.node_types}
            counts.update({edge_key(t): (self.meta.num_edges[t], self._books[t].size(self.part))
                           for t in self.meta.edge_types})
            if not isinstance(value, Tensor) or value.dim() == 0 or \
                    not any(value.size(0) in c for c in counts.values()):
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise ValueError(f"labels must be a tensor with one row per node (or edge) of "
                                 f"a type, in dataset order or per owned one (total, owned: "
                                 f"{counts}), got {got}")
        self._labels = value

    # ---- building in memory --------------------------------------------------------
    @classmethod
    def from_data(cls, node_id: Tensor, x: Optional[Tensor] = None,
                  y: Optional[Tensor] = None, edge_id: Optional[Tensor] = None,
                  edge_attr: Optional[Tensor] = None) -> Any:
        """A store in memory from homogeneous tensors, as PyG's.

        Args:
            node_id (Tensor): the original (global) id of every node row.
            x (Tensor, optional): node features.
            y (Tensor, optional): node labels.
            edge_id (Tensor, optional): the original id of every edge row.
            edge_attr (Tensor, optional): edge features (needs ``edge_id``).
        """
        return cls.from_hetero_data(
            {None: node_id}, _one(x), _one(y),
            None if edge_id is None else {(None, None): edge_id},
            None if edge_attr is None else {(None, None): edge_attr})

    @classmethod
    def from_hetero_data(cls, node_id_dict: Dict[Any, Tensor],
                         x_dict: Optional[Dict[Any, Tensor]] = None,
                         y_dict: Optional[Dict[Any, Tensor]] = None,
                         edge_id_dict: Optional[Dict[Any, Tensor]] = None,
                         edge_attr_dict: Optional[Dict[Any, Tensor]] = None) -> Any:
        """A store in memory from heterogeneous tensors, as PyG's (the dicts of
        :meth:`from_data`'s arguments by node or edge type)."""
        store = cls()
        for node_type, node_id in node_id_dict.items():
            store.put_global_id(node_id, group_name=node_type)
        for name, values in (("x", x_dict), ("y", y_dict)):
            for node_type, value in (values or {}).items():
                store.put_tensor(value, group_name=node_type, attr_name=name)
        for edge_type, edge_id in (edge_id_dict or {}).items():
            store.put_global_id(edge_id, group_name=edge_type)
        for edge_type, value in (edge_attr_dict or {}).items():
            if edge_id_dict is None or edge_type not in edge_id_dict:
                raise ValueError(f"edge_attr of {edge_type!r} needs its edge_id")
            store.put_tensor(value, group_name=edge_type, attr_name="edge_attr")
        return store


def _one(value: Optional[Tensor]) -> Optional[Dict[Any, Tensor]]:
    return None if value is None else {None: value}


def tensor_attrs(keys: List[Tuple[Any, str]], cls: type) -> List[TensorAttr]:
    """``TensorAttr`` s (``index=None``) of ``(group, attribute)`` keys."""
    return [cls(group, attr, None) for group, attr in keys]
