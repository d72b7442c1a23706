"""A typed, homo/hetero-uniform view of a ``Data`` or ``HeteroData`` to partition."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Dict, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.format._meta import AttrSpec
from pyg_dist.format._schema import DTYPES, dtype_name
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType

_SKIP = {"edge_index", "adj_t", "adj", "num_nodes"}


#: names that PyG (and pyg_dist) treat as node-level: never silently dropped
_NODE_NAMES = {"x", "y", "pos", "time", "batch", "n_id", "node_time"}


def _check_graph_level(key: str, value: Tensor, num_nodes: int, edge_index: Tensor) -> None:
    """An attribute of a ``Data`` with neither one row per node nor one per edge.

    A node-level name (``x``, ``y``, ``pos``, ``time``, ``*_mask``, ``node_*``) or an
    edge-level one (``edge_*``) with the wrong row count is an error naming the
    attribute and both counts; anything else is graph-level: not written, with a warning.

    Raises:
        ValueError: for a node- or edge-level name with the wrong number of rows.
    """
    rows = int(value.size(0)) if value.dim() else None
    shown = f"{rows} rows (shape {tuple(value.shape)})" if rows is not None else "a 0-D tensor"
    if key in _NODE_NAMES or key.endswith("_mask") or key.startswith("node_"):
        raise ValueError(f"node attribute '{key}' has {shown}, expected {num_nodes} "
                         f"(one per node, num_nodes={num_nodes})")
    if key.startswith("edge_"):
        num_edges = int(edge_index.size(1)) if edge_index.dim() == 2 else 0
        raise ValueError(f"edge attribute '{key}' has {shown}, expected {num_edges} "
                         f"(one per edge of edge_index)")
    warnings.warn(f"attribute '{key}' ({shown}) has neither one row per node ({num_nodes}) "
                  f"nor one per edge: taken as graph-level, it is not written to the partitions")


@dataclass
class GraphTables:
    """Node and edge tables keyed by type (homogeneous = one node and one edge type).

    Args:
        is_hetero: whether the source was a ``HeteroData``.
        num_nodes: nodes per type.
        node_attrs: per node type, named tensors with one row per node.
        edge_index: per edge type, ``[2, E]`` source/destination ids.
        edge_attrs: per edge type, named tensors with one row per edge.
    """
    is_hetero: bool
    num_nodes: Dict[NodeType, int]
    node_attrs: Dict[NodeType, Dict[str, Tensor]]
    edge_index: Dict[EdgeType, Tensor]
    edge_attrs: Dict[EdgeType, Dict[str, Tensor]]

    @classmethod
    def from_data(cls, data: Union[Data, HeteroData]) -> "GraphTables":
        if isinstance(data, HeteroData):
            tables = cls._from_hetero(data)
        elif isinstance(data, Data):
            tables = cls._from_homo(data)
        else:
            raise TypeError(f"expected a torch_geometric Data or HeteroData, got {type(data)}")
        tables.validate()
        return tables

    @classmethod
    def _from_homo(cls, data: Data) -> "GraphTables":
        if data.edge_index is None:
            raise ValueError("the graph has no edge_index")
        node_attrs, edge_attrs = {}, {}
        for key, value in data.items():
            if key in _SKIP or not isinstance(value, Tensor):
                continue
            if data.is_node_attr(key):
                node_attrs[key] = value
            elif data.is_edge_attr(key):
                edge_attrs[key] = value
            else:
                _check_graph_level(key, value, int(data.num_nodes), data.edge_index)
        return cls(False, {HOMO_NODE: int(data.num_nodes)}, {HOMO_NODE: node_attrs},
                   {HOMO_EDGE: data.edge_index}, {HOMO_EDGE: edge_attrs})

    @classmethod
    def _from_hetero(cls, data: HeteroData) -> "GraphTables":
        num_nodes, node_attrs, edge_index, edge_attrs = {}, {}, {}, {}
        for node_type in data.node_types:
            store = data[node_type]
            num_nodes[node_type] = int(store.num_nodes)
            node_attrs[node_type] = {k: v for k, v in store.items()
                                     if isinstance(v, Tensor) and k not in _SKIP}
        for edge_type in data.edge_types:
            store = data[edge_type]
            if "edge_index" not in store:
                raise ValueError(f"edge type {edge_type} has no edge_index")
            edge_index[edge_type] = store.edge_index
            edge_attrs[edge_type] = {k: v for k, v in store.items()
                                     if isinstance(v, Tensor) and k not in _SKIP}
        return cls(True, num_nodes, node_attrs, edge_index, edge_attrs)

    def validate(self) -> None:
        """Checks shapes, dtypes and id ranges; raises ``ValueError`` naming the problem."""
        for group, attrs in [*self.node_attrs.items(), *self.edge_attrs.items()]:
            for key, value in attrs.items():
                if value.layout != torch.strided or dtype_name(value.dtype) not in DTYPES:
                    raise ValueError(f"attribute '{key}' of {group} is a {value.layout} "
                                     f"{value.dtype} tensor; partitions store dense tensors "
                                     f"of dtype {', '.join(DTYPES)}")
        for node_type, attrs in self.node_attrs.items():
            for key, value in attrs.items():
                if value.dim() == 0 or value.size(0) != self.num_nodes[node_type]:
                    raise ValueError(f"node attribute '{key}' of type '{node_type}' has "
                                     f"{tuple(value.shape)} rows, expected "
                                     f"{self.num_nodes[node_type]} (one per node)")
        for edge_type, index in self.edge_index.items():
            if index.dim() != 2 or index.size(0) != 2:
                raise ValueError(f"edge_index of {edge_type} must have shape [2, E], "
                                 f"got {tuple(index.shape)}")
            if index.dtype != torch.long:
                raise ValueError(f"edge_index of {edge_type} must be int64, got {index.dtype}")
            for row, node_type in ((0, edge_type[0]), (2, edge_type[2])):
                ids = index[row // 2]
                if ids.numel() and (int(ids.min()) < 0
                                    or int(ids.max()) >= self.num_nodes[node_type]):
                    raise ValueError(f"edge_index of {edge_type} refers to a node id outside "
                                     f"[0, {self.num_nodes[node_type]}) of type '{node_type}'")
            for key, value in self.edge_attrs[edge_type].items():
                if value.dim() == 0 or value.size(0) != index.size(1):
                    raise ValueError(f"edge attribute '{key}' of {edge_type} has "
                                     f"{tuple(value.shape)} rows, expected {index.size(1)}")

    @property
    def total_nodes(self) -> int:
        return sum(self.num_nodes.values())

    # ---- the pipeline's GraphSchema (as a chunked source gives it) ---------------------
    @property
    def edge_types(self) -> Tuple[EdgeType, ...]:
        return tuple(self.edge_index)

    @property
    def node_specs(self) -> Dict[NodeType, Dict[str, AttrSpec]]:
        """Per node type, dtype and row shape of each node attribute."""
        return {t: {k: _spec(v) for k, v in a.items()} for t, a in self.node_attrs.items()}

    @property
    def edge_specs(self) -> Dict[EdgeType, Dict[str, AttrSpec]]:
        """Per edge type, dtype and row shape of each edge attribute."""
        return {t: {k: _spec(v) for k, v in a.items()} for t, a in self.edge_attrs.items()}

    def num_edges(self, edge_type: EdgeType) -> int:
        return int(self.edge_index[edge_type].size(1))

    def mask_names(self, node_type: NodeType) -> Tuple[str, ...]:
        """Node attributes that are ``<split>_mask`` tensors (bool, one value per node)."""
        return tuple(f"{name}_mask" for name in self.masks(node_type))

    def masks(self, node_type: NodeType) -> Dict[str, Tensor]:
        """Boolean ``<split>_mask`` attributes of a node type, keyed by split name."""
        return {key[:-len("_mask")]: value for key, value in self.node_attrs[node_type].items()
                if key.endswith("_mask") and value.dtype == torch.bool and value.dim() == 1}


def _spec(value: Tensor) -> AttrSpec:
    return AttrSpec(dtype_name(value.dtype), tuple(value.shape[1:]))
