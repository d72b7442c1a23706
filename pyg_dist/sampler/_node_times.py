"""Node-level times of any node of the graph, and negatives bounded by them, as PyG's.

With a node-level ``time_attr`` and ``edge_label_time``, PyG's link sampling draws each
negative among the nodes that exist at its seed edge's time (``time <= edge_label_time``):
it redraws the later ones (5 rounds), then takes the node with the smallest time. A
node's time lives with its owner; :class:`NodeTimes` fetches it from there, and asks
every partition for its earliest node once.
"""
from __future__ import annotations

from typing import Awaitable, Callable, Dict, Optional, Protocol

import torch
from torch import Tensor

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc import callee, served
from pyg_dist.rpc._routing import fan_out
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler import _direct as direct
from pyg_dist.sampler._checks import RemoteResponseError
from pyg_dist.sampler._features import FeatureFetcher
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.sampler._types import SamplingConfig
from pyg_dist._typing import NodeType

#: rounds of redrawing negatives later than their seed edge (PyG's)
TIME_ROUNDS = 5


class TimedSampler(Protocol):
    """What :class:`NodeTimes` uses of the sampler owning it."""
    meta: PartitionMeta
    group: RpcGroup
    local: LocalSampler
    config: SamplingConfig


def earliest_owned(local: LocalSampler, node_type: NodeType, attr: str) -> Tensor:
    """``[time, id]`` (int64) of this partition's earliest owned node (the smallest
    relabelled id among equal times); empty when it owns no node of ``node_type``."""
    times = local.features.tensor(node_type, attr).long().view(-1)
    if times.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    pos = int(torch.argmin(times))  # the first of equal minima
    start = local.graph.node_book(node_type).start(local.graph.part)
    return torch.tensor([int(times[pos]), start + pos], dtype=torch.long)


@callee("sampler.earliest_node", reads_partition_only=True)
def _serve_earliest_node(node_type: NodeType, attr: str) -> Tensor:
    return earliest_owned(served("sampler"), node_type, attr)


class NodeTimes:
    """Node-level times (``time_attr``) of any node, fetched from the nodes' owners.

    Args:
        sampler: the sampler whose group, partition and ``time_attr`` are used.
    """

    def __init__(self, sampler: TimedSampler) -> None:
        self.sampler = sampler
        self._fetchers: Dict[NodeType, FeatureFetcher] = {}
        self._earliest: Dict[NodeType, int] = {}

    def attr(self, node_type: NodeType) -> Optional[str]:
        """The node-level time attribute of ``node_type`` (``None``: none, e.g. no
        ``time_attr`` or an edge-level one)."""
        attr = self.sampler.config.time_attr
        if attr is None or attr not in self.sampler.meta.node_attrs.get(node_type, {}):
            return None
        return attr

    async def of(self, node_type: NodeType, ids: Tensor) -> Tensor:
        """The times (int64) of nodes ``ids`` (relabelled ids, any owner)."""
        attr = self.attr(node_type)
        if attr is None:
            raise ValueError(f"node type '{node_type}' has no node attribute "
                             f"'{self.sampler.config.time_attr}' (time_attr)")
        if node_type not in self._fetchers:
            s = self.sampler
            self._fetchers[node_type] = FeatureFetcher(
                s.group, s.local, s.meta, node_attrs={node_type: [attr]}, edge_attrs={})
        got = await self._fetchers[node_type].fetch({node_type: ids}, {}, unique=False)
        return got.nodes[node_type][attr].long().view(-1)

    async def earliest(self, node_type: NodeType) -> int:
        """The relabelled id of the graph's earliest node of ``node_type`` (asked of
        every partition once)."""
        if node_type not in self._earliest:
            self._earliest[node_type] = await self._ask_earliest(node_type)
        return self._earliest[node_type]

    async def _ask_earliest(self, node_type: NodeType) -> int:
        group, attr = self.sampler.group, self.attr(node_type)
        found = []
        requests = [(part, direct.call_async(group, group.route(part),
                                             "sampler.earliest_node", node_type, attr))
                    for part in range(group.num_parts) if part != group.part]

        def keep(part: int, got: Tensor) -> None:
            if not isinstance(got, Tensor) or got.dtype != torch.long or got.numel() not in (0, 2):
                raise RemoteResponseError(f"partition {part} answered "
                                          f"'sampler.earliest_node' with {got!r}")
            if got.numel():
                found.append((int(got[0]), int(got[1])))

        await fan_out(requests, lambda: keep(group.part, earliest_owned(
            self.sampler.local, node_type, attr)), keep)
        if not found:
            raise ValueError(f"node type '{node_type}' has no nodes to draw negatives from")
        return min(found)[1]

    async def bounded(self, node_type: NodeType, ids: Tensor, limit: Tensor,
                      redraw: Callable[[int], Tensor],
                      also_bad: Optional[Callable[[Tensor], Awaitable[Tensor]]] = None
                      ) -> Tensor:
        """``ids`` with each node later than its ``limit`` redrawn by ``redraw(n)``
        (:data:`TIME_ROUNDS` rounds), then any still later replaced by the earliest node.

        Args:
            node_type: the type of ``ids``.
            ids: drawn nodes (relabelled ids).
            limit: the latest time allowed, one per id.
            redraw: draws ``n`` new ids.
            also_bad: another reason to redraw an id (e.g. its pair is an edge).
        """
        ids = ids.clone()
        for _ in range(TIME_ROUNDS):
            bad = await self.of(node_type, ids) > limit
            if also_bad is not None:
                bad |= await also_bad(ids)
            if not bool(bad.any()):
                return ids
            ids[bad] = redraw(int(bad.sum()))
        late = await self.of(node_type, ids) > limit
        if bool(late.any()):
            ids[late] = await self.earliest(node_type)
        return ids
