"""Repeated seeds in a node-level batch, kept as PyG's loaders keep them.

PyG's ``NeighborLoader`` (pyg-lib's sampler) puts every seed it is given first in the
batch, a repeated one again in its place (``batch_size`` counts every seed), and gives
every seed its own in-edges. Without ``disjoint`` the sampler here samples a repeated
seed once, as its first occurrence (the hop state holds every node once);
:func:`restore_repeats` then puts every seed back in its place and gives a repeat the
in-edges its first occurrence drew (appended to the first hop's edges), so that its
output equals its first occurrence's. Nothing random happens here: the batch is a
function of the seeds and the batch's random stream, as before (exact resume).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional

import torch
from torch import Tensor

from pyg_dist.sampler._types import SampledSubgraph
from pyg_dist._typing import EdgeType, NodeType


def first_occurrences(ids: Tensor) -> Optional[Tensor]:
    """Positions of the first occurrence of every distinct id, in order (``None``
    when the ids are already distinct)."""
    uniq, inverse = torch.unique(ids, return_inverse=True)
    if uniq.numel() == ids.numel():
        return None
    first = torch.full((uniq.numel(),), ids.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(ids.numel()), reduce="amin")
    return torch.sort(first).values


def restore_repeats(sub: SampledSubgraph, node_type: NodeType, seeds: Tensor,
                    keep: Tensor) -> SampledSubgraph:
    """The subgraph for ``seeds`` (repeats included) from ``sub``, sampled for
    ``seeds[keep]`` (their first occurrences, first in ``sub.node[node_type]``).

    Args:
        sub (SampledSubgraph): sampled for the distinct seeds (not disjoint).
        node_type (NodeType): the seeds' node type.
        seeds (Tensor): every seed as given, repeats included.
        keep (Tensor): :func:`first_occurrences` of ``seeds``.

    Returns:
        SampledSubgraph: ``node[node_type]`` starts with ``seeds``; a repeated seed has
        copies of its first occurrence's in-edges (edge ids repeat); the seeds' other
        appearances (as a sampled neighbour) point to their first occurrence.
    """
    num_seeds, num_distinct = seeds.numel(), keep.numel()
    nodes = sub.node[node_type]
    moved = torch.cat([keep, torch.arange(num_seeds, num_seeds + nodes.numel() - num_distinct)])
    is_first = torch.zeros(num_seeds, dtype=torch.bool)
    is_first[keep] = True
    repeat = torch.nonzero(~is_first).view(-1)  # positions of repeats among the seeds
    distinct, by_id = seeds[keep].sort()
    of_first = by_id[torch.searchsorted(distinct, seeds[repeat])]  # each repeat's first
    row, col, edge = dict(sub.row), dict(sub.col), dict(sub.edge)
    original = dict(sub.original_edge) if sub.original_edge is not None else None
    counts = {t: list(c) for t, c in sub.num_sampled_edges.items()}
    for t in sub.row:
        if t[0] == node_type:
            row[t] = moved[row[t]]
        if t[2] == node_type:
            _copy_in_edges(t, sub, row, col, edge, original, counts, moved, repeat, of_first,
                           num_distinct)
    num_nodes = {t: list(c) for t, c in sub.num_sampled_nodes.items()}
    num_nodes[node_type][0] += num_seeds - num_distinct
    node = {**sub.node, node_type: torch.cat([seeds, nodes[num_distinct:]])}
    return replace(sub, node=node, row=row, col=col, edge=edge, original_edge=original,
                   num_sampled_nodes=num_nodes, num_sampled_edges=counts)


def _copy_in_edges(t: EdgeType, sub: SampledSubgraph, row: Dict[EdgeType, Tensor],
                   col: Dict[EdgeType, Tensor], edge: Dict[EdgeType, Tensor],
                   original: Optional[Dict[EdgeType, Tensor]],
                   counts: Dict[EdgeType, List[int]], moved: Tensor, repeat: Tensor,
                   of_first: Tensor, num_distinct: int) -> None:
    """Gives every repeated seed copies of its first occurrence's in-edges over ``t``,
    after the first hop's edges (``row`` of ``t`` already moved where needed)."""
    old_col = sub.col[t]
    order = torch.argsort(of_first, stable=True)
    per_first = torch.bincount(of_first, minlength=num_distinct)
    begin = torch.cumsum(per_first, 0) - per_first
    copies = torch.zeros(old_col.numel(), dtype=torch.long)
    into_seed = old_col < num_distinct
    copies[into_seed] = per_first[old_col[into_seed]]
    picked = torch.repeat_interleave(torch.arange(old_col.numel()), copies)
    nth = torch.arange(picked.numel()) - torch.repeat_interleave(torch.cumsum(copies, 0) - copies,
                                                                 copies)
    target = repeat[order][begin[old_col[picked]] + nth]
    at = counts[t][0] if counts[t] else old_col.numel()

    def spliced(values: Tensor, extra: Tensor) -> Tensor:
        return torch.cat([values[:at], extra, values[at:]])
    col[t] = spliced(moved[old_col], target)
    row[t] = spliced(row[t], row[t][picked])
    edge[t] = spliced(edge[t], edge[t][picked])
    if original is not None and original.get(t) is not None and original[t].numel():
        original[t] = spliced(original[t], original[t][picked])
    if counts[t]:
        counts[t][0] += picked.numel()
