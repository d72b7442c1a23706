"""Link-level sampling: seed edges, negative sampling, and the label metadata.

Follows PyG's ``LinkNeighborLoader`` semantics: ``binary`` negatives are random
``(src, dst)`` pairs labelled 0; ``triplet`` negatives are random destinations per
positive. With a node-level ``time_attr`` and edge label times, a negative is a node that
exists at its seed edge's time, as PyG draws them (:mod:`pyg_dist.sampler._node_times`).
Unlike PyG, negatives that are real edges are re-drawn (a few rounds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Awaitable, Callable, Dict, List, Optional, Protocol, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc import callee, served
from pyg_dist.rpc._routing import fan_out
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler import _direct as direct
from pyg_dist.sampler._checks import RemoteResponseError
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.sampler._node_times import NodeTimes
from pyg_dist.sampler._types import LinkSeeds, SampledBatch, SampledSubgraph, SamplingConfig
from pyg_dist.store import LocalGraphStore
from pyg_dist._typing import EdgeType, NodeType

NEGATIVE_ROUNDS = 3
#: the ids whose order non-disjoint seeds are deduplicated in, by node type (PyG's order
#: is the original ids'; without one, pyg_dist's relabelled ids')
OrderKey = Callable[[NodeType, Tensor], Awaitable[Tensor]]


class SubgraphSampler(Protocol):
    """What link sampling uses of the
    :class:`~pyg_dist.sampler._neighbor_sampler.DistNeighborSampler` calling it (a protocol:
    the sampler imports this module, not the other way round)."""
    meta: PartitionMeta
    graph: LocalGraphStore
    local: LocalSampler
    group: RpcGroup
    config: SamplingConfig

    @property
    def is_hetero(self) -> bool: ...

    @property
    def node_times(self) -> NodeTimes: ...

    def by_owner(self, node_type: NodeType, ids: Tensor) -> List[Tuple[int, Tensor]]: ...

    async def sample_subgraph(self, seeds: Dict[NodeType, Tensor],
                              seed_time: Optional[Dict[NodeType, Tensor]] = None,
                              rng: Optional[np.random.Generator] = None
                              ) -> SampledSubgraph: ...


@dataclass
class LinkInputs:
    """Seed nodes of a link batch (endpoints of positives and negatives) and the
    batch's seed record (how labels index into the sampled nodes)."""
    seeds: Dict[NodeType, Tensor]
    seed_time: Optional[Dict[NodeType, Tensor]]
    record: LinkSeeds


def has_edges(sampler_local, edge_type: EdgeType, src: Tensor, dst: Tensor) -> Tensor:
    """Which ``(src, dst)`` pairs are edges; ``dst`` must be owned by this partition."""
    csc = sampler_local.graph.csc_by_type[edge_type]
    col = sampler_local.graph.node_book(edge_type[2]).to_local(sampler_local.graph.part, dst)
    start, deg = csc.indptr[col], csc.indptr[col + 1] - csc.indptr[col]
    query = torch.repeat_interleave(torch.arange(col.numel()), deg)
    offsets = torch.arange(query.numel()) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg)
    hit = csc.indices[start[query] + offsets] == src[query]
    out = torch.zeros(col.numel(), dtype=torch.bool)
    out[query[hit]] = True
    return out


@callee("sampler.has_edges", reads_partition_only=True)
def _serve_has_edges(edge_type: EdgeType, src: Tensor, dst: Tensor) -> Tensor:
    return has_edges(served("sampler"), edge_type, src, dst)


async def _edge_mask(sampler: SubgraphSampler, edge_type: EdgeType, src: Tensor,
                     dst: Tensor) -> Tensor:
    """Which ``(src, dst)`` pairs are edges, asked of the partitions owning ``dst``."""
    out = torch.zeros(src.numel(), dtype=torch.bool)
    owners = sampler.by_owner(edge_type[2], dst)
    group = sampler.group
    requests = [(pos, direct.call_async(group, group.route(part), "sampler.has_edges",
                                        edge_type, src[pos], dst[pos]))
                for part, pos in owners if part != group.part]

    def local() -> None:
        for part, pos in owners:
            if part == group.part:
                out[pos] = has_edges(sampler.local, edge_type, src[pos], dst[pos])

    def scatter(pos: Tensor, mask: Tensor) -> None:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or \
                tuple(mask.shape) != (pos.numel(),):
            raise RemoteResponseError(f"a peer answered 'sampler.has_edges' for {pos.numel()} "
                                      f"pairs with {type(mask).__name__} "
                                      f"{getattr(mask, 'dtype', '')} "
                                      f"{tuple(getattr(mask, 'shape', ()))}")
        out[pos] = mask

    await fan_out(requests, local, scatter)
    return out


def _draw(num: int, num_nodes: int, weight: Optional[Tensor],
          gen: Optional[torch.Generator] = None) -> Tensor:
    if weight is not None:
        return torch.multinomial(weight.float(), num, replacement=True, generator=gen)
    return torch.randint(0, num_nodes, (num,), generator=gen)


def _generator(rng: Optional[np.random.Generator]) -> Optional[torch.Generator]:
    """A torch generator seeded from ``rng`` (``None``: torch's global generator)."""
    if rng is None:
        return None
    return torch.Generator().manual_seed(int(rng.integers(0, 2**62)))


async def negatives(sampler: SubgraphSampler, edge_type: EdgeType, src: Tensor,
                    num_dst_per_src: int, neg: NegativeSampling,
                    gen: Optional[torch.Generator] = None,
                    limit: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Random ``(src, dst)`` non-edges: ``src`` given, ``num_dst_per_src`` ``dst`` drawn
    for each.

    Pairs that turn out to be edges are re-drawn up to :data:`NEGATIVE_ROUNDS` times
    (on dense graphs a few may remain, as in PyG). ``limit``: the latest node time
    allowed for each ``src``'s destinations (see :meth:`NodeTimes.bounded`).
    """
    n_dst = sampler.meta.num_nodes[edge_type[2]]
    src = src.repeat_interleave(num_dst_per_src)

    def draw(num: int) -> Tensor:
        return _draw(num, n_dst, neg.dst_weight, gen)

    dst = draw(src.numel())
    if limit is not None:
        dst = await sampler.node_times.bounded(
            edge_type[2], dst, limit.repeat_interleave(num_dst_per_src), draw,
            lambda ids: _edge_mask(sampler, edge_type, src, ids))
        return src, dst
    for _ in range(NEGATIVE_ROUNDS):
        bad = await _edge_mask(sampler, edge_type, src, dst)
        if not bool(bad.any()):
            break
        dst[bad] = draw(int(bad.sum()))
    return src, dst


def _time_limit(sampler: SubgraphSampler, node_type: NodeType, time: Optional[Tensor],
                num: int) -> Optional[Tensor]:
    """The latest node time allowed for ``num`` negatives of ``node_type`` (negative
    ``i`` pairs with seed edge ``i % len(time)``, as PyG's): ``None`` without edge label
    times or a node-level ``time_attr`` of that type (then PyG does not bound either)."""
    if time is None or sampler.node_times.attr(node_type) is None:
        return None
    return time.long().repeat(math.ceil(num / max(time.numel(), 1)))[:num]


def _input_edge_type(sampler: SubgraphSampler, inputs: EdgeSamplerInput) -> EdgeType:
    if inputs.input_type is None and sampler.is_hetero:
        raise ValueError("heterogeneous graph: the link input needs an input_type (edge type)")
    return sampler.meta.edge_type(inputs.input_type)


async def link_seeds(sampler: SubgraphSampler, inputs: EdgeSamplerInput,
                     neg: Optional[NegativeSampling],
                     gen: Optional[torch.Generator] = None,
                     order: Optional[OrderKey] = None) -> LinkInputs:
    """Positive and negative endpoints as seeds, and the batch's seed record (``order``:
    see :data:`OrderKey`)."""
    edge_type = _input_edge_type(sampler, inputs)
    src, dst, label, time = inputs.row, inputs.col, inputs.label, inputs.time
    sampler.graph.node_book(edge_type[0]).check(src)
    sampler.graph.node_book(edge_type[2]).check(dst)
    num_pos = src.numel()
    src_time = dst_time = time
    if neg is not None and neg.is_binary():
        num_neg = math.ceil(num_pos * neg.amount)
        n_src = sampler.meta.num_nodes[edge_type[0]]
        neg_src = _draw(num_neg, n_src, neg.src_weight, gen)
        limit = _time_limit(sampler, edge_type[0], time, num_neg)
        if limit is not None:
            neg_src = await sampler.node_times.bounded(
                edge_type[0], neg_src, limit, lambda n: _draw(n, n_src, neg.src_weight, gen))
        neg_src, neg_dst = await negatives(sampler, edge_type, neg_src, 1, neg, gen,
                                           _time_limit(sampler, edge_type[2], time, num_neg))
        src, dst = torch.cat([src, neg_src]), torch.cat([dst, neg_dst])
        label = torch.ones(num_pos) if label is None else label
        label = torch.cat([label, label.new_zeros((num_neg, *label.shape[1:]))])
        if time is not None:
            src_time = dst_time = time.repeat(1 + math.ceil(neg.amount))[:num_pos + num_neg]
    elif neg is not None and neg.is_triplet():
        if label is not None:
            raise ValueError("triplet negative sampling does not take edge labels")
        _, neg_dst = await negatives(sampler, edge_type, inputs.row, int(neg.amount), neg,
                                     gen, _time_limit(sampler, edge_type[2], time, num_pos))
        neg_dst = neg_dst.view(num_pos, -1).t().reshape(-1)  # grouped by round, like PyG
        dst = torch.cat([dst, neg_dst])
        if time is not None:
            dst_time = time.repeat(1 + int(neg.amount))
    keys = None
    if order is not None and not sampler.config.disjoint:
        keys = (await order(edge_type[0], src), await order(edge_type[2], dst))
    return _assemble(sampler, edge_type, inputs, src, dst, label, src_time, dst_time, neg,
                     num_pos, keys)


def _unique(ids: Tensor, disjoint: bool, key: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """``(seeds, inverse)``: ``ids`` themselves when disjoint, else deduplicated in the
    order of ``key`` (one key per id, equal exactly for equal ids; default: the ids)."""
    if disjoint:
        return ids, torch.arange(ids.numel())
    if key is None:
        return torch.unique(ids, return_inverse=True)
    keys, inverse = torch.unique(key, return_inverse=True)
    out = torch.empty(keys.numel(), dtype=ids.dtype)
    out[inverse] = ids
    return out, inverse


def _assemble(sampler: SubgraphSampler, edge_type: EdgeType, inputs: EdgeSamplerInput,
              src: Tensor, dst: Tensor, label: Optional[Tensor], src_time: Optional[Tensor],
              dst_time: Optional[Tensor], neg: Optional[NegativeSampling],
              num_pos: int, keys: Optional[Tuple[Tensor, Tensor]] = None) -> LinkInputs:
    disjoint = sampler.config.disjoint
    same = edge_type[0] == edge_type[2]
    if same:
        seed, inverse = _unique(torch.cat([src, dst]), disjoint,
                                None if keys is None else torch.cat(keys))
        inv_src, inv_dst = inverse[:src.numel()], inverse[src.numel():]
        seeds = {edge_type[0]: seed}
        times = None if src_time is None else {edge_type[0]: torch.cat([src_time, dst_time])}
    else:
        (s, inv_src), (d, inv_dst) = [_unique(x, disjoint, None if keys is None else k)
                                      for x, k in zip((src, dst), keys or (None, None))]
        seeds = {edge_type[0]: s, edge_type[2]: d}
        times = None if src_time is None else {edge_type[0]: src_time, edge_type[2]: dst_time}
    if neg is not None and neg.is_triplet():
        dst_neg = inv_dst[num_pos:].view(-1, num_pos).t().squeeze(-1)
        record = LinkSeeds(edge_type, inputs.input_id, src_index=inv_src,
                           dst_pos_index=inv_dst[:num_pos], dst_neg_index=dst_neg,
                           src_time=src_time)
    else:
        record = LinkSeeds(edge_type, inputs.input_id, torch.stack([inv_src, inv_dst]),
                           edge_label=label, edge_label_time=src_time)
    return LinkInputs(seeds, times, record)


async def sample_links(sampler: SubgraphSampler, inputs: EdgeSamplerInput,
                       neg: Optional[NegativeSampling],
                       rng: Optional[np.random.Generator] = None,
                       order: Optional[OrderKey] = None) -> SampledBatch:
    """Samples the neighbourhoods of a batch of seed edges (and negatives); ``rng``
    seeds the negatives and the hops (default: the global generators); ``order``: see
    :data:`OrderKey`."""
    if neg is None:  # PyG < 2.8 also carries it on the input
        neg = getattr(inputs, "neg_sampling", None)
    if inputs.time is not None and not sampler.config.disjoint:
        raise ValueError("edge label times need a temporal sampler (time_attr set)")
    link = await link_seeds(sampler, inputs, neg, _generator(rng), order)
    sub = await sampler.sample_subgraph(link.seeds, link.seed_time, rng=rng)
    if sub.batch is not None:
        num_pos = inputs.row.numel()
        sub.batch = {t: b % num_pos for t, b in sub.batch.items()}
    return SampledBatch(sub, link.record)
