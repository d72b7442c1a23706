"""A partition assignment the user gives (``method="given"``), checked before use."""
from __future__ import annotations

from typing import Any, Dict, Mapping

import numpy as np
import torch

from pyg_dist.partition._assign import AssignInput, Assignment, AssignOptions
from pyg_dist._typing import HOMO_NODE, NodeType


def check_given(num_nodes: Mapping[NodeType, int], is_hetero: bool, num_parts: int,
                given: Any) -> Dict[NodeType, np.ndarray]:
    """Checks a given assignment and returns it as int64 arrays per node type.

    Args:
        num_nodes: nodes per type of the graph.
        is_hetero (bool): whether the graph is heterogeneous.
        num_parts (int): number of partitions.
        given (Tensor or dict): the partition id of every node: a 1-d integer tensor
            (or array) for a homogeneous graph, a dict of them by node type for a
            heterogeneous one.

    Raises:
        ValueError: naming the problem: a missing or unknown node type, a wrong
            length or dtype, an id outside ``[0, num_parts)``, or an empty partition.
    """
    if given is None:
        raise ValueError("method='given' needs assignment= (the partition id of every node)")
    if is_hetero != isinstance(given, Mapping):
        want = "a dict of tensors by node type" if is_hetero else "a tensor"
        raise ValueError(f"assignment must be {want} for a "
                         f"{'HeteroData' if is_hetero else 'Data'} graph, "
                         f"got {type(given).__name__}")
    given = dict(given) if is_hetero else {HOMO_NODE: given}
    missing = [t for t in num_nodes if t not in given]
    unknown = [t for t in given if t not in num_nodes]
    if missing:
        raise ValueError(f"assignment lacks node type '{missing[0]}'")
    if unknown:
        raise ValueError(f"assignment has node type '{unknown[0]}', which the graph lacks")
    parts = {t: _given_parts(t, given[t], n, num_parts, is_hetero)
             for t, n in num_nodes.items()}
    counts = sum(np.bincount(p, minlength=num_parts) for p in parts.values())
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValueError(f"partition {int(empty[0])} of the given assignment is empty "
                         f"(every partition must own at least one node)")
    return parts


def _given_parts(node_type: NodeType, value: Any, num_nodes: int, num_parts: int,
                 is_hetero: bool) -> np.ndarray:
    """One node type's given partition ids, checked (see :func:`check_given`)."""
    where = f" of node type '{node_type}'" if is_hetero else ""
    try:
        value = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"assignment{where} must be a tensor of partition ids: {exc}") from exc
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise ValueError(f"assignment{where} must be an integer tensor, got {value.dtype}")
    if value.dim() != 1 or value.numel() != num_nodes:
        raise ValueError(f"assignment{where} must be 1-d with one entry per node "
                         f"({num_nodes} nodes), got shape {tuple(value.shape)}")
    parts = value.cpu().numpy().astype(np.int64)
    if parts.size and (parts.min() < 0 or parts.max() >= num_parts):
        raise ValueError(f"assignment{where} holds partition ids outside [0, {num_parts}) "
                         f"(e.g. {int(parts[(parts < 0) | (parts >= num_parts)][0])})")
    return parts


def given_assign(graph: AssignInput, num_parts: int, options: AssignOptions) -> Assignment:
    """The assignment the user gave, checked (see :func:`check_given`)."""
    return Assignment(check_given(graph.num_nodes, graph.is_hetero, num_parts, options.given))
