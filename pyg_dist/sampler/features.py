"""Fetching node and edge attributes by global id from every partition.

One request per remote partition carries all node and edge types, unique ids
only; the local gather runs while those requests are in flight.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.partition.meta import PartitionMeta
from pyg_dist.rpc.runtime import RpcGroup
from pyg_dist.sampler.local import LocalSampler
from pyg_dist.sampler.types import FeatureRequest, FeatureResponse
from pyg_dist.typing import EdgeType, NodeType


@dataclass
class _Plan:
    """Where each requested row lives: unique ids sorted by owner, and how to undo it."""
    ids: Tensor            # unique ids, grouped by owning partition
    counts: List[int]      # ids per partition, in partition order
    inverse: Tensor        # output row i = fetched row inverse[i]


def _plan(ids: Tensor, owner_of, num_parts: int, unique: bool) -> _Plan:
    if unique:
        ids, inverse = torch.unique(ids, return_inverse=True)
    else:
        inverse = None
    owner = owner_of(ids)
    if num_parts == 1:
        return _Plan(ids, [ids.numel()], inverse if inverse is not None else
                     torch.arange(ids.numel()))
    order = torch.argsort(owner, stable=True)
    undo = torch.empty_like(order)
    undo[order] = torch.arange(order.numel())
    counts = torch.bincount(owner, minlength=num_parts).tolist()
    return _Plan(ids[order], counts, undo if inverse is None else undo[inverse])


class FeatureFetcher:
    """Reads attributes of arbitrary global ids, wherever they live.

    Args:
        group (RpcGroup): the RPC group (routes partitions to peers).
        local (LocalSampler): this process's partition (gathers own rows).
        meta (PartitionMeta): attribute names and partition books.
        node_attrs: attributes to read per node type (default: all stored).
        edge_attrs: attributes to read per edge type (default: all stored).
    """

    def __init__(self, group: RpcGroup, local: LocalSampler, meta: PartitionMeta,
                 node_attrs: Optional[Dict[NodeType, List[str]]] = None,
                 edge_attrs: Optional[Dict[EdgeType, List[str]]] = None) -> None:
        self.group = group
        self.local = local
        self.meta = meta
        self.node_attrs = node_attrs if node_attrs is not None else {
            t: sorted(a) for t, a in meta.node_attrs.items()}
        self.edge_attrs = edge_attrs if edge_attrs is not None else {
            t: sorted(a) for t, a in meta.edge_attrs.items()}
        self._node_books = {t: meta.node_book(t) for t in meta.node_types}
        self._edge_books = {t: meta.edge_book(t) for t in meta.edge_types}

    async def fetch(self, nodes: Dict[NodeType, Tensor], edges: Dict[EdgeType, Tensor],
                    unique: bool = True) -> FeatureResponse:
        """Attributes of ``nodes``/``edges`` (global ids), rows in the given order.

        Args:
            unique: deduplicate ids before fetching (needed when ids may repeat).
        """
        parts = self.meta.num_parts
        node_plans = {t: _plan(ids, self._node_books[t].owner, parts, unique)
                      for t, ids in nodes.items() if self.node_attrs.get(t)}
        edge_plans = {t: _plan(ids, self._edge_books[t].owner, parts, unique)
                      for t, ids in edges.items() if self.edge_attrs.get(t)}
        requests = self._requests(node_plans, edge_plans)
        futures = {p: self.group.call_async(self.group.route(p), "sampler.features", req)
                   for p, req in requests.items() if p != self.group.part}
        responses = {}
        if self.group.part in requests:
            responses[self.group.part] = self.local.features_of(requests[self.group.part])
        if futures:
            done = await asyncio.gather(*futures.values())
            responses.update(zip(futures.keys(), done))
        return self._assemble(node_plans, edge_plans, responses)

    def _requests(self, node_plans: Dict[NodeType, _Plan], edge_plans: Dict[EdgeType, _Plan]
                  ) -> Dict[int, FeatureRequest]:
        requests: Dict[int, FeatureRequest] = {}
        for kind, plans, attrs in (("nodes", node_plans, self.node_attrs),
                                   ("edges", edge_plans, self.edge_attrs)):
            for group, plan in plans.items():
                for p, chunk in enumerate(torch.split(plan.ids, plan.counts)):
                    if chunk.numel() == 0:
                        continue
                    req = requests.setdefault(p, FeatureRequest())
                    getattr(req, kind)[group] = chunk
                    getattr(req, f"{kind[:-1]}_attrs")[group] = attrs[group]
        return requests

    def _assemble(self, node_plans: Dict[NodeType, _Plan], edge_plans: Dict[EdgeType, _Plan],
                  responses: Dict[int, FeatureResponse]) -> FeatureResponse:
        out = FeatureResponse()
        for group, plan in node_plans.items():
            out.nodes[group] = self._gather(group, plan, self.node_attrs[group],
                                            [(p, r.nodes) for p, r in responses.items()],
                                            self.meta.node_attrs.get(group, {}))
        for group, plan in edge_plans.items():
            out.edges[group] = self._gather(group, plan, self.edge_attrs[group],
                                            [(p, r.edges) for p, r in responses.items()],
                                            self.meta.edge_attrs.get(group, {}))
        return out

    @staticmethod
    def _gather(group: object, plan: _Plan, attrs: List[str],
                parts: List[Tuple[int, Dict]], specs: Dict) -> Dict[str, Tensor]:
        by_part = dict(parts)
        out = {}
        for attr in attrs:
            chunks = [by_part[p][group][attr] for p, n in enumerate(plan.counts) if n > 0]
            if chunks:
                out[attr] = torch.cat(chunks).index_select(0, plan.inverse)
            else:
                spec = specs[attr]
                out[attr] = torch.empty((0, *spec.shape), dtype=getattr(torch, spec.dtype))
        return out
