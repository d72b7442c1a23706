"""LABOR sampling on one machine, over an unpartitioned CSC graph (numpy).

:func:`labor_sample` draws what :class:`~pyg_dist.DistNeighborSampler` draws with
``sampling_strategy="labor"`` on any number of partitions, for the same seeds and
batch random seed: the same edges per seed per layer, in the same order. It is a
plain, vectorised implementation of the rule in :mod:`pyg_dist.sampler._labor`
(independent of the numba kernels), for users who want LABOR on one machine or to
check the distributed sampler.

Example:
    >>> from torch_geometric.utils import to_torch_csc_tensor  # or any CSC builder
    >>> out = labor_sample({("_N", "_E", "_N"): (colptr, row)}, {"_N": seeds},
    ...                    {("_N", "_E", "_N"): [15, 10]}, random_seed=1234)
    >>> out.hops[0][("_N", "_E", "_N")]  # (dst, src, edge) of the first layer
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from pyg_dist.sampler._labor import hop_seed, type_seed, variates
from pyg_dist._typing import EdgeType, NodeType

__all__ = ["LaborSample", "labor_sample"]

#: per edge type: ``(colptr, row)``, optionally with ``weights`` and ``edge_ids``
CSCGraph = Union[Tuple[Tensor, Tensor], Tuple[Tensor, Tensor, Optional[Tensor]],
                 Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]]


@dataclass
class LaborSample:
    """What :func:`labor_sample` drew.

    Args:
        node: per node type, every sampled node (seeds first, then each layer's new
            nodes in order of first appearance).
        hops: per layer, per edge type, ``(dst, src, edge)``: the destination (seed),
            source and edge id of every drawn edge, grouped by destination in frontier
            order, each group ascending by ``r / w``.
    """
    node: Dict[NodeType, Tensor]
    hops: List[Dict[EdgeType, Tuple[Tensor, Tensor, Tensor]]]


def _draw(graph: CSCGraph, dst: np.ndarray, fanout: int, seed: int
          ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One edge type, one layer: ``(dst, src, edge)`` of the drawn edges."""
    colptr, row = (np.asarray(t, dtype=np.int64) for t in graph[:2])
    weights = graph[2] if len(graph) > 2 else None
    edge_ids = graph[3] if len(graph) > 3 and graph[3] is not None else None
    eids = np.arange(row.size) if edge_ids is None else np.asarray(edge_ids, dtype=np.int64)
    start, deg = colptr[dst], colptr[dst + 1] - colptr[dst]
    group = np.repeat(np.arange(dst.size), deg)
    pos = np.arange(group.size) - np.repeat(np.cumsum(deg) - deg, deg) + start[group]
    r = variates(row[pos], seed)
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)[pos]
        keep = w > 0
        group, pos, r = group[keep], pos[keep], r[keep] / w[keep]
    order = np.lexsort((eids[pos], row[pos], r, group))  # by seed, then rank
    group, pos = group[order], pos[order]
    rank = np.arange(group.size) - np.searchsorted(group, group)
    if fanout >= 0:
        group, pos = group[rank < fanout], pos[rank < fanout]
    return dst[group], row[pos], eids[pos]


def labor_sample(graphs: Dict[EdgeType, CSCGraph], seeds: Dict[NodeType, Tensor],
                 num_neighbors: Dict[EdgeType, Sequence[int]], random_seed: int,
                 layer_dependency: bool = False) -> LaborSample:
    """LABOR sampling (sequential Poisson) around ``seeds`` on one machine.

    A homogeneous graph is one node type and one edge type (e.g. ``"_N"`` and
    ``("_N", "_E", "_N")``, pyg_dist's names). Node ids are the hash keys: pass the
    dataset's original ids to get what the distributed sampler draws.

    Args:
        graphs: per edge type ``(src, rel, dst)``, its in-edges as CSC: ``colptr``
            (one more entry than ``dst`` nodes), ``row`` (source id of every edge), and
            optionally ``weights`` (per edge, ``>= 0``; zero-weight edges are never
            drawn) and ``edge_ids`` (per edge: the ids reported, which also break ties;
            default: CSC positions).
        seeds: per node type, distinct seed ids.
        num_neighbors: per edge type, the fan-out of every layer (``-1``: all).
        random_seed (int): the batch's random seed
            (:func:`~pyg_dist.sampler._labor.batch_seed` of the batch's generator, in
            the distributed sampler).
        layer_dependency (bool): one variate per vertex for all layers.
    """
    seen = {t: np.asarray(s, dtype=np.int64) for t, s in seeds.items()}
    known = {t: set(v.tolist()) for t, v in seen.items()}
    frontier = dict(seen)
    hops: List[Dict[EdgeType, Tuple[Tensor, Tensor, Tensor]]] = []
    layers = len(next(iter(num_neighbors.values())))
    for layer in range(layers):
        base = hop_seed(random_seed, layer, layer_dependency)
        drawn: Dict[EdgeType, Tuple[Tensor, Tensor, Tensor]] = {}
        new: Dict[NodeType, List[int]] = {}
        for edge_type, graph in graphs.items():
            fanout = int(num_neighbors.get(edge_type, [0] * layers)[layer])
            dst = frontier.get(edge_type[2])
            if fanout == 0 or dst is None or dst.size == 0:
                continue
            d, s, e = _draw(graph, dst, fanout, type_seed(base, edge_type[0]))
            drawn[edge_type] = (torch.from_numpy(d), torch.from_numpy(s), torch.from_numpy(e))
            for v in s.tolist():
                if v not in known.setdefault(edge_type[0], set()):
                    known[edge_type[0]].add(v)
                    new.setdefault(edge_type[0], []).append(v)
        hops.append(drawn)
        frontier = {t: np.asarray(v, dtype=np.int64) for t, v in new.items()}
        for t, v in frontier.items():
            seen[t] = np.concatenate([seen.get(t, np.empty(0, np.int64)), v])
    return LaborSample({t: torch.from_numpy(v) for t, v in seen.items()}, hops)
