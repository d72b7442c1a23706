"""One hop over every partition: requests out, the hops run here, responses merged.

Requests to remote partitions go out first (one per partition, all in flight). Meanwhile
the hops that run in this process do: this partition's own, then those of partitions
read directly on this machine (:mod:`pyg_dist.sampler._direct`), each drawing its edges'
original ids straight into the batch's columns (:meth:`HopState.spares`). Every
response but the own partition's is checked before use. Responses are merged in a
single machine's order: per edge type, by destination in the frontier.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc._routing import fan_out
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler._checks import check_hop_response
from pyg_dist.sampler._hop_state import EdgePiece, HopState
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.sampler import _direct as direct, _timing as timing
from pyg_dist.sampler._types import HopRequest, HopResponse

#: per partition, its request and, per edge type of it, where its rows go
Plan = Dict[int, Tuple[HopRequest, List[tuple]]]


def order(group: RpcGroup, plan: Plan, here_only: bool = False) -> List[int]:
    """The partitions of ``plan`` in merge order (``here_only``: those run here)."""
    me, reads = group.part, direct.of(group)
    parts = sorted(plan, key=lambda p: (p != me, p not in reads, p))
    return [p for p in parts if p == me or p in reads] if here_only else parts


async def run(group: RpcGroup, local: LocalSampler, meta: PartitionMeta, plan: Plan,
              state: Optional[HopState] = None) -> Dict[int, HopResponse]:
    """Every partition's response to its request of ``plan`` (``state``: the batch
    whose columns the hops run here draw their edges' original ids into)."""
    here = order(group, plan, here_only=True)
    sent = [((p, group.route(p)), req) for p, (req, _) in plan.items() if p not in here]
    requests = [(tag, group.call_async(tag[1], "sampler.hop", req)) for tag, req in sent]
    responses: Dict[int, HopResponse] = {}

    def run_here() -> None:
        start = timing.now_ns()
        try:
            hops_here()
        finally:
            timing.lap(timing.current(), "kernel", start)

    def hops_here() -> None:
        for part in here:
            req = plan[part][0]
            spares = state.spares(req) if state is not None else None
            if part == group.part:
                responses[part] = local.hop(req, spares)
            else:  # what the callee 'sampler.hop' would run, on this process's mapping
                reads = direct.of(group)
                reads.calls += 1
                check((part, group.route(part)), reads.sampler(part).hop(req, spares))
            if state is not None and req.original_eids:
                state.drew(req, responses[part])

    def check(tag: Tuple[int, int], resp: HopResponse) -> None:
        check_hop_response(plan[tag[0]][0], resp, meta.num_nodes, group.describe(tag[1]),
                           num_edges=meta.num_edges)
        responses[tag[0]] = resp

    await fan_out(requests, run_here, check)
    return responses


def merge(group: RpcGroup, meta: PartitionMeta, state: HopState, plan: Plan,
          responses: Dict[int, HopResponse]) -> None:
    """Adds every response's edges to ``state`` and closes the hop: edge type by edge
    type (``meta.edge_types``' order), all partitions' edges in a single machine's order
    (by destination, see :meth:`HopState.add_hop_edges`), so new nodes get the positions
    single-machine sampling gives them."""
    pieces: Dict[tuple, List[EdgePiece]] = {}
    for part in order(group, plan):  # the order in-place pieces were drawn in
        resp = responses[part]
        for i, (edge_type, seeds, batch) in enumerate(plan[part][1]):
            counts = resp.counts[i]
            pieces.setdefault(edge_type, []).append(EdgePiece(
                col=None, nbrs=resp.nbrs[i],
                eids=resp.eids[i],
                batch=torch.repeat_interleave(batch, counts) if batch is not None else None,
                original=resp.original_eids[i] if resp.original_eids else None,
                seeds=seeds, counts=counts))
    sampled = {t: 0 for t in meta.edge_types}
    for edge_type in meta.edge_types:
        if edge_type in pieces:
            sampled[edge_type] = state.add_hop_edges(edge_type, pieces[edge_type])
    state.end_hop(sampled)
