"""Joining RPC when a ``DistNeighborSampler`` is first used, and driving one by hand as
``torch_geometric.distributed``'s users (and PyG's own tests) do::

    sampler = DistNeighborSampler(data=(feature_store, graph_store), current_ctx=ctx,
                                  num_neighbors=[-1, -1])
    init_rpc(current_ctx=ctx, master_addr=HOST, master_port=PORT)
    sampler.init_sampler_instance()   # joins RPC, or takes the group init_rpc joined
    sampler.register_sampler_rpc()    # nothing left to do: see below
    sampler.event_loop = ConcurrentEventLoop(2)
    sampler.event_loop.start_loop()
    out = sampler.event_loop.run_task(coro=sampler.node_sample(inputs))

A sampler built while this process is in no RPC group joins one on first use
(sampling, :meth:`~PygDriving.init_sampler_instance`, or reading ``group``,
``local``, ``direct`` or ``fetcher``): the group ``init_rpc`` joined meanwhile if it
did, else one it joins itself. Joining and starting to serve a partition are
collective: every rank's sampler must be used (or :meth:`init_sampler_instance`
called) once. ``node_sample`` / ``edge_sample`` are the sampler's own
:meth:`sample_from_nodes` / :meth:`sample_from_edges` (original ids in and out, PyG's
outputs) as coroutines that may be awaited on any event loop.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, Optional, Union

import numpy as np
from torch import Tensor
from torch_geometric.sampler import (EdgeSamplerInput, HeteroSamplerOutput, NegativeSampling,
                                     NodeSamplerInput, SamplerOutput)

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc._event_loop import ConcurrentEventLoop
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.rpc._context import DistContext
from pyg_dist.sampler import _direct as direct
from pyg_dist.sampler._direct import DirectReads
from pyg_dist.sampler._features import FeatureFetcher
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.sampler._node_times import NodeTimes
from pyg_dist.sampler._serving import serving_group
from pyg_dist.sampler._types import SamplingConfig
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._original_ids import ID_ATTR
from pyg_dist._typing import NodeType

Output = Union[SamplerOutput, HeteroSamplerOutput]


@dataclass
class Binding:
    """What a sampler holds once it serves its partition in an RPC group.

    Args:
        group: the RPC group.
        local: the sampler of this partition the group serves.
        direct: the partitions read from their files on this machine.
        fetcher: the sampler's feature fetcher.
        rng: the sampler's own random stream (one per rank).
    """
    group: RpcGroup
    local: LocalSampler
    direct: DirectReads
    fetcher: FeatureFetcher
    rng: np.random.Generator


class PygDriving:
    """The RPC binding of :class:`~pyg_dist.DistNeighborSampler` (joined on first use)
    and ``torch_geometric.distributed``'s methods for driving it by hand."""

    meta: PartitionMeta
    config: SamplingConfig
    _binding: Optional[Binding] = None
    _id_fetcher: Optional[FeatureFetcher] = None
    _node_times: Optional[NodeTimes] = None
    # DistNeighborSampler's: its stores and options; the cache; sampling in original ids
    features: LocalFeatureStore
    graph: LocalGraphStore
    options: Dict[str, Any]
    _ctx: Optional[DistContext]
    _seed: int
    _build_cache: Callable[[Any], None]
    _from_nodes: Callable[[NodeSamplerInput], Awaitable[Output]]
    _from_edges: Callable[[EdgeSamplerInput, Optional[NegativeSampling]], Awaitable[Output]]
    #: the loop PyG's scripts set and run ``node_sample`` / ``edge_sample`` on (pyg_dist
    #: samples on its own loop and never reads it; any event loop works)
    event_loop: Optional[ConcurrentEventLoop] = None

    def _bind(self) -> Binding:
        """Joins (collectively) or takes the RPC group, serving this partition there."""
        group, local = serving_group(self._ctx, self.features, self.graph)
        if not self.graph.is_partitioned:  # built in memory: sample the partition served
            self.features, self.graph, self.meta = local.features, local.graph, local.graph.meta
        fetcher = FeatureFetcher(group, local, self.meta, original_ids=True,
                                 wire_dtype=self.options["wire_dtype"])
        self._binding = Binding(group, local, direct.of(group), fetcher,
                                np.random.default_rng([self._seed, group.rank]))
        if self.options["feature_cache"]:
            self._build_cache(self.options["feature_cache"])
        return self._binding

    def id_fetcher(self) -> FeatureFetcher:
        """The fetcher of nodes' original ids (only), built on first use."""
        if self._id_fetcher is None:
            self._id_fetcher = FeatureFetcher(
                self.group, self.local, self.meta, edge_attrs={},
                node_attrs={t: [ID_ATTR] for t in self.meta.node_types})
        return self._id_fetcher

    @property
    def node_times(self) -> NodeTimes:
        """Node-level times (``time_attr``) of any node, fetched from the owners."""
        if self._node_times is None:
            self._node_times = NodeTimes(self)
        return self._node_times

    async def original_ids_of(self, node_type: NodeType, ids: Tensor) -> Tensor:
        """The original ids of relabelled node ids ``ids`` (one request per owner)."""
        got = await self.id_fetcher().fetch({node_type: ids}, {}, unique=True)
        return got.nodes[node_type][ID_ATTR]

    def bound(self) -> Binding:
        """The sampler's RPC binding; joins RPC first if needed (collective)."""
        return self._binding if self._binding is not None else self._bind()

    @property
    def group(self) -> RpcGroup:
        """The RPC group serving this partition (joined on first use)."""
        return self.bound().group

    @property
    def local(self) -> LocalSampler:
        """The sampler of this partition (owned nodes, local kernels)."""
        return self.bound().local

    @property
    def direct(self) -> DirectReads:
        """The partitions this process reads from their files on this machine."""
        return self.bound().direct

    @property
    def fetcher(self) -> FeatureFetcher:
        """The feature fetcher of sampled nodes (and their original ids)."""
        return self.bound().fetcher

    # ---- torch_geometric.distributed's names ------------------------------------------
    def init_sampler_instance(self) -> None:
        """Joins RPC, or takes the group ``init_rpc`` joined, and serves this partition
        to the peers (collective: every rank calls it). PyG built its one-machine
        sampler here; pyg_dist's sampler is complete after construction otherwise."""
        self.bound()

    def register_sampler_rpc(self) -> None:
        """Makes sure the peers can sample this partition: pyg_dist's callees are
        registered by name when it is imported, and the partition is served once the
        sampler is bound to its group (:meth:`init_sampler_instance`; collective)."""
        self.bound()

    async def node_sample(self, inputs: NodeSamplerInput) -> Output:
        """Samples around ``inputs.node`` (original ids, any owner): the output of
        :meth:`sample_from_nodes`, on whatever event loop awaits it.

        Raises:
            TypeError: ``inputs`` is not a ``NodeSamplerInput``.
        """
        if not isinstance(inputs, NodeSamplerInput):
            raise TypeError(f"node_sample() takes a NodeSamplerInput, got "
                            f"{type(inputs).__name__}")
        return await self._on_sampling_loop(self._from_nodes, inputs)

    async def edge_sample(self, inputs: EdgeSamplerInput, sample_fn: Callable[..., Any],
                          num_nodes: Union[int, Dict[NodeType, int]], disjoint: bool,
                          node_time: Any = None,
                          neg_sampling: Optional[NegativeSampling] = None) -> Output:
        """Samples around the seed edges ``(inputs.row, inputs.col)`` (original ids)
        and ``neg_sampling``'s negatives: the output of :meth:`sample_from_edges`, on
        whatever event loop awaits it, with PyG's signature.

        Args:
            inputs: the seed edges (``time``: the edge label times).
            sample_fn: this sampler's :meth:`node_sample` (as PyG passes it).
            num_nodes: the graph's node count (an ``int``: all types together; or a
                dict by node type), checked against the partitioning.
            disjoint: must be the sampler's own (``disjoint`` or ``time_attr``).
            node_time: PyG bounds negatives by it (with ``inputs.time``); pyg_dist
                bounds them by the sampler's own node-level ``time_attr``, where PyG's
                scripts take ``node_time`` from (a sampler without one: not supported).
            neg_sampling: negatives, as :meth:`sample_from_edges`.

        Raises:
            ValueError: ``num_nodes`` or ``disjoint`` disagree with the sampler.
            NotImplementedError: another ``sample_fn``, or ``node_time`` with negatives
                for a sampler without a node-level ``time_attr``.
        """
        if sample_fn != self.node_sample:
            raise NotImplementedError("edge_sample() samples with this sampler's own "
                                      "node_sample; another sample_fn is not supported")
        if node_time is not None and neg_sampling is not None and not any(
                self.node_times.attr(t) for t in self.meta.node_types):
            raise NotImplementedError("edge_sample(): this sampler bounds negatives by its own "
                                      "node-level time_attr and has none; build it with "
                                      "time_attr, or pass node_time=None")
        if bool(disjoint) != self.config.disjoint:
            raise ValueError(f"edge_sample(disjoint={bool(disjoint)}) but this sampler was "
                             f"built {'with' if self.config.disjoint else 'without'} disjoint "
                             f"subtrees (disjoint=True or time_attr imply them)")
        check_num_nodes(self.meta, num_nodes)
        return await self._on_sampling_loop(self._from_edges, inputs, neg_sampling)

    async def _on_sampling_loop(self, method: Callable[..., Awaitable[Output]],
                                *args: Any) -> Output:
        """``await method(*args)`` on the group's loop (where RPC futures complete),
        from any loop: the binding (a collective on first use) happens here first."""
        loop = self.group.loop
        if asyncio.get_running_loop() is loop.loop:
            return await method(*args)
        return await asyncio.wrap_future(loop.submit(method(*args)))


def check_num_nodes(meta: PartitionMeta, num_nodes: Any) -> None:
    """Raises unless ``num_nodes`` (an ``int``, all node types together, or a dict by
    node type) matches the partitioning's node counts."""
    counts = dict(meta.num_nodes)
    if isinstance(num_nodes, dict):
        wrong = {t: n for t, n in num_nodes.items() if counts.get(t) != int(n)}
        if wrong:
            raise ValueError(f"num_nodes {wrong} disagrees with the partitioning's node "
                             f"counts {counts}")
        return
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)):
        raise TypeError(f"num_nodes must be an int or a dict by node type, got "
                        f"{type(num_nodes).__name__}")
    if int(num_nodes) != sum(counts.values()):
        raise ValueError(f"num_nodes={int(num_nodes)} but the partitioned graph has "
                         f"{sum(counts.values())} nodes")
