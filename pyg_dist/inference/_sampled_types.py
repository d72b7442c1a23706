"""Which node types sampled inference computes, and what it reads from a loader batch.

A homogeneous graph is the one-node-type case (``node_type=None``): the model is called
as ``model(batch.x, batch.edge_index)`` and the batch itself holds the seeds. On a
heterogeneous graph the model is called as ``model(batch.x_dict,
batch.edge_index_dict)`` and the seeds of type ``t`` are the first
``batch[t].batch_size`` nodes of ``batch[t]`` and rows of ``out[t]``.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from pyg_dist.inference import _tensor_rows as rows
from pyg_dist.store import LocalGraphStore
from pyg_dist._typing import NodeType


def output_types(graph: LocalGraphStore,
                 node_types: Optional[Sequence[NodeType]]) -> List[NodeType]:
    """The node types sampled inference computes, in order; read from the partition's
    metadata, so every rank gets the same list or the same error.

    Args:
        graph (LocalGraphStore): this rank's partition.
        node_types (List[str], optional): the requested node types (heterogeneous
            graphs only); default: every node type with nodes and features ``x``.

    Raises:
        ValueError: on a ``node_types`` entry that is not a node type of the graph, a
            repeated entry, or ``node_types`` on a homogeneous graph.
    """
    meta = graph.meta
    if not graph.is_hetero:
        if node_types is not None:
            raise ValueError("node_types is only for heterogeneous graphs")
        return list(meta.node_types)
    if node_types is None:
        return [t for t in meta.node_types
                if meta.num_nodes[t] > 0 and "x" in meta.node_attrs.get(t, {})]
    if isinstance(node_types, str) or not isinstance(node_types, Sequence):
        raise TypeError(f"node_types must be a list of node types, got {node_types!r}")
    for node_type in node_types:
        if node_type not in meta.node_types:
            raise ValueError(f"node_types: {node_type!r} is not a node type of the graph "
                             f"(node types: {list(meta.node_types)})")
    if len(set(node_types)) != len(node_types):
        raise ValueError(f"node_types repeats a node type: {list(node_types)}")
    return list(node_types)


def seed_rows(model: torch.nn.Module, batch: object, node_type: Optional[NodeType]
              ) -> Optional[Tensor]:
    """The seeds' float32 output rows on the CPU; ``None`` where a heterogeneous model's
    output has no entry for ``node_type``.

    Raises:
        TypeError: if a heterogeneous model does not return a dict.
    """
    if node_type is None:
        y = model(batch.x, batch.edge_index)[:batch.batch_size]
        return y.to("cpu", torch.float32)
    out = model(batch.x_dict, batch.edge_index_dict)
    if not isinstance(out, dict):
        raise TypeError(f"on a heterogeneous graph the model must return a dict by node "
                        f"type, got {type(out).__name__}")
    if node_type not in out:
        return None
    return out[node_type][:batch[node_type].batch_size].to("cpu", torch.float32)


def seeds_store(batch: object, node_type: Optional[NodeType]) -> object:
    """The batch (homogeneous) or its store of the seeds' node type (it has
    ``batch_size`` and ``part_n_id``)."""
    return batch if node_type is None else batch[node_type]


def count_fetches(batch: object, graph: LocalGraphStore) -> None:
    """Counts the feature rows ``x`` of a batch that came from other partitions."""
    types = graph.meta.node_types if graph.is_hetero else [None]
    for node_type in types:
        store = seeds_store(batch, node_type)
        x = getattr(store, "x", None)
        if not isinstance(x, Tensor) or x.dim() != 2:
            continue
        book = graph.node_book(node_type)
        start = book.start(graph.part)
        rows.count_batch_fetches(store, start, start + book.size(graph.part),
                                 x.element_size() * x.size(1))
