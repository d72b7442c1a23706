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
import torch.distributed as dist
from torch import Tensor

from pyg_dist.rpc.context import DistContext
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.typing import EdgeType, NodeType

Stores = Tuple[LocalFeatureStore, LocalGraphStore]


def _chunk(values: Tensor, index: int, parts: int) -> Tensor:
    """The ``index``-th of ``parts`` nearly equal contiguous chunks (along dim -1)."""
    n = values.size(-1)
    lo, hi = index * n // parts, (index + 1) * n // parts
    return values[..., lo:hi]


def _gather_all(values: Tensor, world_size: int, group: Optional[object]) -> List[Tensor]:
    """All ranks' tensors (any length along dim -1), in rank order (a collective)."""
    n = torch.tensor([values.size(-1)])
    sizes = [torch.zeros_like(n) for _ in range(world_size)]
    dist.all_gather(sizes, n, group=group)
    width = int(max(s.item() for s in sizes))
    padded = torch.zeros((*values.shape[:-1], width), dtype=values.dtype)
    padded[..., :values.size(-1)] = values
    out = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(out, padded, group=group)
    return [o[..., :int(s.item())] for o, s in zip(out, sizes)]


def _split(local: Tensor, ctx: DistContext, num_parts: int, force_even: bool) -> Tensor:
    part = ctx.partition_id(num_parts)
    ranks = ctx.ranks_of(part, num_parts)
    mine = _chunk(local, ranks.index(ctx.rank), len(ranks))
    if not force_even or ctx.world_size == 1:
        return mine
    everything = torch.cat(_gather_all(mine, ctx.world_size, _cpu_group(ctx)), dim=-1)
    return _chunk(everything, ctx.rank, ctx.world_size)


def node_split(data: Union[Stores, LocalFeatureStore], split: str = "train",
               ctx: Optional[DistContext] = None, node_type: Optional[NodeType] = None,
               force_even: bool = False) -> Tensor:
    """Global ids of the ``split`` nodes this trainer should use as seeds.

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
    features = data[0] if isinstance(data, (tuple, list)) else data
    ctx = ctx or DistContext.from_env()
    ids = features.split_ids(split, node_type)
    return _split(ids, ctx, features.meta.num_parts, force_even)


def edge_split(data: Stores, ctx: Optional[DistContext] = None,
               edge_type: Optional[EdgeType] = None, force_even: bool = False,
               return_eids: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """The edges (``[2, E]`` global ``(src, dst)``) this trainer uses as link seeds.

    Every partition's stored edges (those whose destination it owns) are divided
    evenly among its trainers, or with ``force_even`` over all ranks.

    Args:
        data: ``(feature_store, graph_store)``.
        return_eids: also return the global edge ids.
    """
    graph = data[1]
    ctx = ctx or DistContext.from_env()
    edge_type = graph.meta.edge_type(edge_type)
    src, dst = graph.csc_by_type[edge_type].coo()
    local = torch.stack([src, dst, graph.csc_by_type[edge_type].edge_ids()])
    out = _split(local, ctx, graph.num_parts, force_even)
    return (out[:2], out[2]) if return_eids else out[:2]


def _cpu_group(ctx: DistContext) -> Optional[object]:
    """The gloo group for seed collectives (initialising the process group if needed)."""
    from pyg_dist.rpc import runtime

    if runtime.is_initialized():
        return runtime.current().cpu_group
    return runtime.ensure_process_group(ctx)


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
