"""Which seeds each trainer uses, and in what order, epoch after epoch.

``node_split``/``edge_split`` give every trainer the seeds its partition owns,
balanced across the trainers of that partition, or (``force_even``) across all
ranks. ``EpochPlan`` shuffles with ``seed + epoch`` and pads so that every rank
yields the same number of batches (DDP must never wait on a finished rank).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.loader._id_collective import cpu_group, gather_all, to_original
from pyg_dist.rpc._context import DistContext
from pyg_dist.store._original_ids import PartIds
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist._typing import EdgeType, NodeType

Stores = Tuple[LocalFeatureStore, LocalGraphStore]


def _chunk(values: Tensor, index: int, parts: int) -> Tensor:
    """The ``index``-th of ``parts`` nearly equal contiguous chunks (along dim -1)."""
    n = values.size(-1)
    lo, hi = index * n // parts, (index + 1) * n // parts
    return values[..., lo:hi]


def _split(local: Tensor, ctx: DistContext, num_parts: int, force_even: bool) -> Tensor:
    part = ctx.partition_id(num_parts)
    ranks = ctx.ranks_of(part, num_parts)
    mine = _chunk(local, ranks.index(ctx.rank), len(ranks))
    if not force_even or ctx.world_size == 1:
        return mine
    everything = torch.cat(gather_all(mine, ctx.world_size, cpu_group(ctx)), dim=-1)
    return _chunk(everything, ctx.rank, ctx.world_size)


def node_split(data: Union[Stores, LocalFeatureStore], split: str = "train",
               ctx: Optional[DistContext] = None, node_type: Optional[NodeType] = None,
               force_even: bool = False) -> Tensor:
    """Original ids of the ``split`` nodes this trainer should use as seeds.

    Each partition's split nodes are divided evenly among the trainers serving it;
    with ``force_even`` they are re-balanced over all ranks (a collective: every
    rank must call it), so counts differ by at most one.

    Args:
        data: ``(feature_store, graph_store)`` or the feature store.
        split: ``"train"``, ``"val"``, ``"test"`` (from ``<split>_mask`` at partition time).
        ctx: this process's context (default: from the environment).
        node_type: the node type (heterogeneous graphs).
        force_even: balance across all ranks, not only within a partition.
    """
    stores = tuple(data) if isinstance(data, (tuple, list)) else (data,)
    features = stores[0]
    ctx = ctx or DistContext.from_env()
    node_type = features.meta.node_type(node_type)
    ids = features.split_ids(split, node_type)  # relabelled ids the partition owns
    ids = PartIds.of_stores(*stores).original("node", node_type, ids)
    return _split(ids, ctx, features.meta.num_parts, force_even)


def stored_edges(data: Stores, ctx: DistContext, edge_type: EdgeType) -> Tensor:
    """``[3, E]``: original ``(src, dst, edge id)`` of every edge of ``edge_type`` the
    partition stores, in stored order. A collective when the job has several ranks
    (sources owned elsewhere are translated by their owners)."""
    graph = data[1]
    src, dst = graph.csc_by_type[edge_type].coo()
    table = PartIds.of_stores(data[1], data[0])
    src_type, _, dst_type = edge_type
    if src_type == dst_type:
        both = to_original({src_type: torch.cat([src, dst])}, table, ctx)[src_type]
        src, dst = both[:src.numel()], both[src.numel():]
    else:
        got = to_original({src_type: src, dst_type: dst}, table, ctx)
        src, dst = got[src_type], got[dst_type]
    eids = table.original("edge", edge_type, graph.csc_by_type[edge_type].edge_ids())
    return torch.stack([src, dst, eids])


def edge_split(data: Stores, ctx: Optional[DistContext] = None,
               edge_type: Optional[EdgeType] = None, force_even: bool = False,
               return_eids: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """The edges (``[2, E]`` original ``(src, dst)`` ids) this trainer uses as link seeds.

    Every partition's stored edges (those whose destination it owns) are divided
    evenly among its trainers, or with ``force_even`` over all ranks. A collective when
    the job has several ranks (sources owned elsewhere are translated by their owners):
    every rank calls it.

    Args:
        data: ``(feature_store, graph_store)``.
        return_eids: also return the original edge ids.
    """
    ctx = ctx or DistContext.from_env()
    edge_type = data[1].meta.edge_type(edge_type)
    local = stored_edges(data, ctx, edge_type)
    out = _split(local, ctx, data[1].num_parts, force_even)
    return (out[:2], out[2]) if return_eids else out[:2]


@dataclass
class EpochPlan:
    """Seed order and batch boundaries of one rank.

    Args:
        num_seeds: seeds this rank holds.
        batch_size: seeds per batch.
        num_batches: batches per epoch on every rank (the maximum over ranks, or this
            rank's own count when batches need not be even).
        shuffle: reshuffle every epoch with ``seed + epoch``.
        drop_last: drop a last incomplete batch.
        seed: base seed of the shuffle.
    """
    num_seeds: int
    batch_size: int
    num_batches: int
    shuffle: bool
    drop_last: bool
    seed: int

    @staticmethod
    def local_batches(num_seeds: int, batch_size: int, drop_last: bool) -> int:
        return num_seeds // batch_size if drop_last else math.ceil(num_seeds / batch_size)

    def order(self, epoch: int) -> Tensor:
        """Positions into this rank's seeds for one epoch (shuffled with ``seed + epoch``)."""
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + epoch)
            return torch.randperm(self.num_seeds, generator=gen)
        return torch.arange(self.num_seeds)

    def batches(self, epoch: int) -> List[Tensor]:
        """``num_batches`` tensors of positions into this rank's seeds.

        When other ranks have more batches, this rank pads by repeating its own
        batches of the epoch in order, so every rank runs exactly ``num_batches``
        batches and no batch holds a seed twice.
        """
        own = [b for b in torch.split(self.order(epoch), self.batch_size) if b.numel()]
        if self.drop_last and own and own[-1].numel() < self.batch_size:
            own.pop()
        if self.num_batches > 0 and not own:
            raise ValueError("this rank has no seeds but other ranks do: give every rank at "
                             "least one seed (e.g. node_split(..., force_even=True))")
        return [own[i % len(own)] for i in range(self.num_batches)] if own else []
