"""``GCNConv``'s degree normalisation over a partitioned graph.

``gcn_norm`` weighs edge ``(j, i)`` by ``deg(j)^-1/2 * deg(i)^-1/2``, where ``deg`` is
the in-degree in the *whole* graph after self loops were added. A batch's subgraph
does not hold the in-edges of its halo nodes, so their degrees come from their owners
(:func:`node_degrees` of every owned node, shared through a ``DistTensor``), and the
layer runs with ``normalize`` switched off on the weights computed here
(:func:`normalized`), which are exactly what ``gcn_norm`` computes on the full graph:
existing self loops are replaced by one loop per node, as ``add_remaining_self_loops``
does. The weight of an added loop is asked of PyG's own ``gcn_norm`` (:func:`loop_weight`):
without edge weights, PyG 2.8.1 gives it weight 1 even for ``improved=True``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.nn.conv import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from pyg_dist.inference._subgraph import OneHop

# (weight of an added self loop, whether loops are added), or None: no normalisation
Norm = Optional[Tuple[float, bool]]


def norm_of(layer: torch.nn.Module) -> Norm:
    """How ``layer`` normalises: ``None`` unless it is a normalising ``GCNConv``."""
    if not isinstance(layer, GCNConv) or not layer.normalize:
        return None
    return loop_weight(bool(layer.improved)), bool(layer.add_self_loops)


def loop_weight(improved: bool) -> float:
    """The weight ``gcn_norm`` gives an added self loop (edges without weights), read
    off PyG's own ``gcn_norm`` on the graph ``0 -> 1``: the loop of node 1 gets
    ``w / (1 + w)``."""
    edge_index, weight = gcn_norm(torch.tensor([[0], [1]]), None, 2, improved, True,
                                  "source_to_target", torch.float64)
    value = float(weight[(edge_index[0] == 1) & (edge_index[1] == 1)][0])
    return value / (1.0 - value)


def node_degrees(hop: OneHop, norm: Tuple[float, bool]) -> Tensor:
    """The whole-graph degree (as ``gcn_norm`` counts it) of the destinations of ``hop``."""
    fill, add_loops = norm
    src, dst = hop.edge_index
    count = torch.bincount(dst, minlength=hop.num_dst).to(torch.float32)
    if not add_loops:
        return count
    loops = torch.bincount(dst[src == dst], minlength=hop.num_dst).to(torch.float32)
    loop_weight = torch.where(loops > 0, torch.ones_like(count), torch.full_like(count, fill))
    return count - loops + loop_weight


def normalized(hop: OneHop, degrees: Tensor, norm: Tuple[float, bool]) -> Tuple[Tensor, Tensor]:
    """``(edge_index, edge_weight)`` of ``hop`` as ``gcn_norm`` makes them on the full graph.

    Args:
        hop (OneHop): the batch's subgraph.
        degrees (Tensor): the whole-graph degree of every node of ``hop.n_id``.
        norm: the layer's :func:`norm_of`.
    """
    fill, add_loops = norm
    edge_index = hop.edge_index
    weight = torch.ones(edge_index.size(1))
    if add_loops:
        is_loop = edge_index[0] == edge_index[1]
        had_loop = torch.zeros(hop.num_dst, dtype=torch.bool)
        had_loop[edge_index[1][is_loop]] = True
        nodes = torch.arange(hop.num_dst)
        edge_index = torch.cat([edge_index[:, ~is_loop], torch.stack([nodes, nodes])], dim=1)
        loop_weight = torch.where(had_loop, 1.0, fill).to(torch.float32)
        weight = torch.cat([weight[~is_loop], loop_weight])
    inv_sqrt = degrees.to(torch.float32).pow(-0.5)
    inv_sqrt.masked_fill_(inv_sqrt == float("inf"), 0.0)
    return edge_index, inv_sqrt[edge_index[0]] * weight * inv_sqrt[edge_index[1]]


@contextmanager
def normalize_off(layer: GCNConv) -> Iterator[GCNConv]:
    """``layer`` with ``normalize=False`` for the duration (restored afterwards)."""
    before = layer.normalize
    layer.normalize = False
    try:
        yield layer
    finally:
        layer.normalize = before
