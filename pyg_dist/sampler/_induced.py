"""``subgraph_type="induced"``, as PyG defines it: a batch holds every edge of the graph
between its sampled nodes, not only the edges that were sampled.

Nodes are sampled as usual; then one more round, shaped like a hop (one request per
partition for every edge type, remote ones in flight at once, responses checked),
asks each owner for the whole in-neighbourhood of its sampled nodes (fan-out -1), and
keeps the edges whose source was sampled too. That round moves every sampled node's
in-edges: what an induced subgraph costs (PyG's sampler scans the same neighbourhoods
in memory). Disjoint and temporal sampling are not combined with it
(``NotImplementedError`` when the sampler is built). ``num_sampled_edges`` no longer
describes the edges and is left empty; ``num_sampled_nodes`` stays.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Protocol, Tuple

import torch
from torch import Tensor

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.sampler._node_index import NodeIndex
from pyg_dist.sampler._types import HopRequest, HopResponse, SampledSubgraph
from pyg_dist._typing import EdgeType, NodeType

Plan = Dict[int, Tuple[HopRequest, List[Tuple[EdgeType, Tensor]]]]


class HopRunner(Protocol):
    """What the induced round uses of the
    :class:`~pyg_dist.sampler._neighbor_sampler.DistNeighborSampler` calling it (a
    protocol: the sampler imports this module, not the other way round)."""
    meta: PartitionMeta
    original_ids: bool

    def by_owner(self, node_type: NodeType, ids: Tensor) -> List[Tuple[int, Tensor]]: ...

    async def run_hop(self, plan: Plan) -> Dict[int, HopResponse]: ...


def _plan(sampler: HopRunner, sub: SampledSubgraph) -> Plan:
    """Per owner: the sampled destination nodes it owns, every edge type, fan-out -1."""
    plan: Plan = {}
    for edge_type in sampler.meta.edge_types:
        src, dst = sub.node.get(edge_type[0]), sub.node.get(edge_type[2])
        if src is None or dst is None or not src.numel() or not dst.numel():
            continue
        for part, pos in sampler.by_owner(edge_type[2], dst):
            req, where = plan.setdefault(part, (HopRequest(
                [], [], [], [], False, "uniform", None, None, 0,
                original_eids=sampler.original_ids), []))
            req.edge_types.append(edge_type)
            req.seeds.append(dst[pos])
            req.fanouts.append(-1)
            req.seed_time.append(None)
            where.append((edge_type, pos))
    return plan


async def induce(sampler: HopRunner, sub: SampledSubgraph) -> SampledSubgraph:
    """``sub`` with its edges replaced by every edge between its nodes."""
    index = {}
    for node_type, ids in sub.node.items():
        index[node_type] = NodeIndex(max(ids.numel(), 1))
        index[node_type].insert(ids)  # positions 0..n-1: node ids are distinct
    plan = _plan(sampler, sub)
    responses = await sampler.run_hop(plan)
    parts: Dict[str, Dict[EdgeType, List[Tensor]]] = {k: {} for k in ("row", "col", "edge",
                                                                      "original")}
    for part in sorted(plan):
        resp = responses[part]
        for i, (edge_type, pos) in enumerate(plan[part][1]):
            src = index[edge_type[0]].lookup(resp.nbrs[i])
            keep = src >= 0
            got = {"row": src[keep], "col": torch.repeat_interleave(pos, resp.counts[i])[keep],
                   "edge": resp.eids[i][keep]}
            if resp.original_eids:
                got["original"] = resp.original_eids[i][keep]
            for key, value in got.items():
                parts[key].setdefault(edge_type, []).append(value)
    empty = torch.empty(0, dtype=torch.long)

    def cat(key: str) -> Dict[EdgeType, Tensor]:
        return {t: torch.cat(parts[key][t]) if t in parts[key] else empty
                for t in sampler.meta.edge_types}

    return dataclasses.replace(sub, row=cat("row"), col=cat("col"), edge=cat("edge"),
                               original_edge=cat("original") if sampler.original_ids else None,
                               num_sampled_edges={})
