"""``DistNeighborSampler``: multi-hop neighbour sampling over all partitions.

Per hop: group the frontier by owner with the range book, send ONE request per
remote partition carrying every edge type (all in flight at once), sample the
owned part locally meanwhile, then merge, dedupe and relabel.
"""
from __future__ import annotations

import logging
import dataclasses
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.sampler import (BaseSampler, EdgeSamplerInput, HeteroSamplerOutput,
                                     NegativeSampling, NodeSamplerInput, SamplerOutput)

from pyg_dist.format._meta import PartitionMeta
from pyg_dist._madvise import keep_freed_memory
from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._context import DistContext, check_context
from pyg_dist.rpc._routing import group_by_owner, split_by_owner
from pyg_dist.sampler._bidirectional import bidirectional
from pyg_dist.sampler._cache.feature_cache import Budget, check_budget
from pyg_dist.sampler._compat import accept_pyg_sampler_options, pyg_order
from pyg_dist.sampler._induced import induce
from pyg_dist.sampler import _direct as direct, _hop_round as hop_round, _labor as labor, _timing as timing
from pyg_dist.sampler._cache import shared as shared_cache
from pyg_dist.sampler._hop_round import Plan
from pyg_dist.sampler._hop_state import HopState
from pyg_dist.sampler._id_lookup import relabel
from pyg_dist.sampler._joint_hop import JointHops
from pyg_dist.store._original_ids import ID_ATTR
from pyg_dist.sampler._link import OrderKey, sample_links
from pyg_dist.sampler._options import check_attr, check_time
from pyg_dist.sampler._pyg_driving import PygDriving
from pyg_dist.sampler._stores import options_meta_of, unpack_stores
from pyg_dist.sampler._node_index import NodeIndexPool
from pyg_dist.sampler._repeats import first_occurrences, restore_repeats
from pyg_dist.sampler._types import (HopRequest, HopResponse,
                                    NodeSeeds, NumNeighbors, SampledBatch, SampledSubgraph,
                                    SamplingConfig)
from pyg_dist.sampler._warmup import warm_up_for
from pyg_dist.sampler._wire import WireSpec
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._original_ids import check_ids
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, NodeType

log = logging.getLogger("pyg_dist")

Output = Union[SamplerOutput, HeteroSamplerOutput]


class DistNeighborSampler(PygDriving, BaseSampler):
    """Samples multi-hop neighbourhoods of seeds spread over all partitions.

    PyG's interface (:meth:`sample_from_nodes`, :meth:`sample_from_edges`) takes and
    returns the dataset's original ids. Inside, and in the async methods the loaders
    call (:meth:`sample_nodes`, :meth:`sample_edges`, :meth:`sample_subgraph`), it
    works in pyg_dist's **relabelled** ids; the loaders translate the user's original
    ids at construction and return original ids in batches (:mod:`pyg_dist.store._original_ids`). Owners send every sampled
    edge's original id with the hop (``SampledSubgraph.original_edge``), and its
    fetcher reads every sampled node's original id with its rows
    (``original_ids=True``).

    Args:
        data: ``(feature_store, graph_store)`` of this rank's partition.
        num_neighbors: fan-out per hop (a list for every edge type, or a dict by
            edge type); ``-1`` takes all neighbours.
        current_ctx (DistContext, optional): this process's context. Built outside
            RPC, the sampler joins on first use (collective), or takes the group PyG's
            ``init_rpc`` joined meanwhile (:mod:`pyg_dist.sampler._pyg_driving`).
        replace (bool): sample with replacement.
        subgraph_type (str): ``"directional"`` (PyG's default), ``"bidirectional"``
            or ``"induced"``, as PyG (:mod:`pyg_dist.sampler._bidirectional`,
            :mod:`pyg_dist.sampler._induced`).
        disjoint (bool): a separate subtree per seed.
        temporal_strategy (str): ``"uniform"`` or ``"last"``.
        time_attr (str, optional): node or edge attribute with time (implies
            ``disjoint``): no sampled neighbour is newer than its seed.
        weight_attr (str, optional): edge attribute with sampling weights.
        seed (int, optional): random seed (default: drawn from torch's generator).
        feature_cache (int or float, optional): keep the node attributes of the remote
            nodes most referenced by this partition's edges, within this many bytes
            (``int``) or this fraction of each node type's halo nodes (``float`` in
            ``(0, 1]``); fetched once, here (:mod:`pyg_dist.sampler._cache.feature_cache`). Rows are
            exactly the owners'; this rank's feature store then refuses ``put`` (its
            peers may cache it). ``None``/``0``: no cache.
        wire_dtype (optional): float32 attributes peers send as ``bfloat16`` or
            ``float16``, cast back on arrival (:mod:`pyg_dist.sampler._wire`).
        sampling_strategy (str): ``"neighbor"`` (default: independent draws per seed)
            or ``"labor"``: layer-neighbour sampling, exactly ``min(k, degree)``
            in-neighbours per seed as well, but seeds of a batch share one variate per
            candidate vertex, so they pick the same neighbours where their
            neighbourhoods overlap (far fewer distinct nodes per batch;
            :mod:`pyg_dist.sampler._labor`). Not with ``replace``, ``disjoint`` or
            ``time_attr``.
        layer_dependency (bool): with ``"labor"``, one variate per vertex for all
            layers (default: one per layer).
        **pyg_options: ``torch_geometric.distributed``'s ``channel``, ``concurrency``,
            ``device``, ``shuffle`` and ``rpc_worker_names``: accepted with no effect,
            warned about once (:mod:`pyg_dist.sampler._compat`). Its positional order
            ``(current_ctx, data, num_neighbors)`` is accepted too.
    """

    def __init__(self, data: Tuple[LocalFeatureStore, LocalGraphStore],
                 num_neighbors: NumNeighbors, current_ctx: Optional[DistContext] = None,
                 replace: bool = False, subgraph_type: str = "directional",
                 disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 seed: Optional[int] = None, feature_cache: Budget = None,
                 wire_dtype: WireSpec = None, sampling_strategy: str = "neighbor",
                 layer_dependency: bool = False, **pyg_options: Any) -> None:
        data, num_neighbors, current_ctx = pyg_order(data, num_neighbors, current_ctx)
        accept_pyg_sampler_options(pyg_options)
        check_budget(feature_cache)  # now, not when RPC is joined on first use
        features, graph = unpack_stores(data, in_memory=True)
        keep_freed_memory()  # each batch's arrays reuse the last one's pages
        self.features, self.graph, self.meta = features, graph, graph.meta
        #: the sampling options it was built with (a loader given this sampler uses them)
        self.options: Dict[str, Any] = dict(
            num_neighbors=num_neighbors, replace=replace, subgraph_type=subgraph_type,
            disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr,
            weight_attr=weight_attr, sampling_strategy=sampling_strategy,
            layer_dependency=layer_dependency, feature_cache=feature_cache,
            wire_dtype=wire_dtype)
        self._ctx = check_context(current_ctx)
        if not graph.is_partitioned:  # built in memory: this rank's view until it binds
            self.meta = options_meta_of(self._ctx, features, graph)
        self.config = self.build_config(self.meta, num_neighbors, replace, subgraph_type,
                                        disjoint, temporal_strategy, time_attr, weight_attr,
                                        sampling_strategy, layer_dependency)
        #: owners send sampled edges' original ids with every hop (loaders need them)
        self.original_ids = True
        self._seed = seed if seed is not None else int(torch.randint(0, 2**62, (1,)))
        warm_up_for(self.config.sampling_strategy, self.meta)  # before joining RPC
        if runtime.is_initialized():  # else joined on first use (PyG's init_rpc may come)
            self._bind()
        self._edge_hints: Dict = {}  # room for a batch's edges' original ids, by type
        self._indexes = NodeIndexPool()  # hash tables reused by the next batches

    def _build_cache(self, budget: Budget) -> None:
        """Fills the fetcher's cache, leaving out partitions whose owner holds more than
        its files (rows ``put`` there could change) and partitions read directly from
        their files on this machine (their rows never cross the network)."""
        reads = direct.of(self.group)
        skip = tuple(sorted(set(reads.private_parts()) | set(reads.parts)))
        self.fetcher.cache = shared_cache.build(self.fetcher, budget, skip)
        self.features.seal("peers may cache rows of this partition (feature_cache); put "
                           "before building loaders")
        cache = self.fetcher.cache
        log.info("pyg_dist: rank %d caches %d remote node rows (%.1f MB%s)%s", self.group.rank,
                 cache.num_rows if cache else 0, (cache.nbytes if cache else 0) / 1e6,
                 f", shared by this machine in {cache.file.path}" if cache and cache.file else "",
                 f", not of partitions {list(skip)} (read directly, or not only files)"
                 if skip else "")

    @staticmethod
    def build_config(meta: PartitionMeta, num_neighbors: NumNeighbors, replace: bool = False,
                     subgraph_type: str = "directional", disjoint: bool = False,
                     temporal_strategy: str = "uniform", time_attr: Optional[str] = None,
                     weight_attr: Optional[str] = None, sampling_strategy: str = "neighbor",
                     layer_dependency: bool = False) -> SamplingConfig:
        """Checks the sampling options against the graph (no RPC); raises on bad ones."""
        config = SamplingConfig.build(
            num_neighbors, meta.edge_types, replace=replace,
            disjoint=disjoint or time_attr is not None, temporal_strategy=temporal_strategy,
            time_attr=time_attr, weight_attr=weight_attr,
            subgraph_type=str(getattr(subgraph_type, "value", subgraph_type)),
            sampling_strategy=sampling_strategy, layer_dependency=layer_dependency)
        check_attr(meta, time_attr, "time_attr", nodes=True)
        check_time(meta, time_attr)
        check_attr(meta, weight_attr, "weight_attr", nodes=False)
        return config

    @property
    def is_hetero(self) -> bool:
        return self.meta.is_hetero

    @property
    def num_hops(self) -> int:
        return self.config.num_hops

    # ---- the hop loop ----------------------------------------------------------------
    async def sample_subgraph(self, seeds: Dict[NodeType, Tensor],
                              seed_time: Optional[Dict[NodeType, Tensor]] = None,
                              rng: Optional[np.random.Generator] = None) -> SampledSubgraph:
        """Samples around ``seeds`` (global ids per node type; unique unless disjoint).

        ``rng`` draws the seeds of every hop's random streams (default: this sampler's
        own stream, which advances with every hop of every batch); loaders pass one per
        batch, made from ``(seed, epoch, batch, rank)``, so a batch samples the same
        neighbourhoods whatever ran before it (exact resume, any concurrency). With
        LABOR, its first draw is the batch's random seed (:func:`labor.batch_seed`)."""
        rng = rng if rng is not None else self.bound().rng
        labor_seed = labor.batch_seed(rng) if self.config.is_labor else None
        for node_type, ids in seeds.items():
            self.graph.node_book(node_type).check(ids)
        if self.config.is_temporal and seed_time is None:
            seed_time = await self._node_time(seeds)
        fan = max(max(f) for f in self.config.num_neighbors.values())
        hint = sum(s.numel() for s in seeds.values()) * (1 + max(fan, 1)) ** min(self.num_hops, 2)
        laps = timing.Laps(hops=self.num_hops)
        state = HopState(seeds, self.config.disjoint, seed_time,
                         capacity_hint=min(hint, max(self.meta.num_nodes.values())),
                         original_eids=self.original_ids, edge_hints=self._edge_hints,
                         pool=self._indexes, key_bounds=self.meta.num_nodes,
                         num_hops=self.num_hops)
        laps("dedupe")  # the hash tables
        joint = self._joint_hops()
        for hop in range(self.num_hops):
            rng_seed = int(rng.integers(0, 2**62))
            if joint is not None:
                joint.run(state, hop, rng_seed, laps)
                continue
            plan = self._plan(hop, state, rng_seed, labor_seed)
            responses = await self.run_hop(plan, state)
            laps("sample")
            hop_round.merge(self.group, self.meta, state, plan, responses)
            laps("dedupe")
        sub, kind = state.output(list(self.meta.edge_types)), self.config.subgraph_type
        state.release()
        laps("dedupe")
        if kind == "induced":
            sub = await induce(self, sub)
        elif kind == "bidirectional":
            sub = bidirectional(sub, self.is_hetero)
        laps("sample")
        return sub

    def _joint_hops(self) -> Optional[JointHops]:
        """What runs this sampler's hops in one pass over every partition read here
        (:mod:`pyg_dist.sampler._joint_hop`), once bound; ``None`` where it cannot."""
        binding = self.bound()
        if getattr(self, "_joint", (None, None))[0] is not binding:
            self._joint = (binding, JointHops.of(self))
        return self._joint[1]

    def _plan(self, hop: int, state: HopState, rng_seed: int,
              labor_seed: Optional[int] = None) -> Plan:
        """Splits the frontier by owner: per partition, a request and where rows go
        (``rng_seed``: the hop's; ``labor_seed``: the batch's LABOR seed; ``None``:
        neighbour sampling)."""
        plan: Plan = {}
        if labor_seed is not None:  # one seed per layer, the same for every partition
            labor_seed = labor.hop_seed(labor_seed, hop, self.config.layer_dependency)
        for edge_type in self.meta.edge_types:
            fanout = self.config.num_neighbors[edge_type][hop]
            front = state.frontier.get(edge_type[2])
            if fanout == 0 or front is None:
                continue
            book = self.graph.node_book(edge_type[2])
            for part, pos, owned in group_by_owner(front.ids, book.offsets, book.name):
                req, where = plan.setdefault(
                    part, (self._request(rng_seed + 7919 * part, labor_seed), []))
                whole = pos.numel() == front.ids.numel()  # one owner: no copies
                req.edge_types.append(edge_type)
                req.seeds.append(front.ids if whole else owned.to(front.ids.dtype))
                req.fanouts.append(fanout)
                req.seed_time.append(_at(front.time, pos, whole))
                where.append((edge_type, _at(front.local, pos, whole),
                              _at(front.batch, pos, whole)))
        return plan

    def _request(self, rng_seed: int, labor_seed: Optional[int] = None) -> HopRequest:
        c = self.config
        return HopRequest([], [], [], [], c.replace, c.temporal_strategy, c.time_attr,
                          c.weight_attr, rng_seed, original_eids=self.original_ids,
                          labor_seed=labor_seed)

    def by_owner(self, node_type: NodeType, ids: Tensor) -> List[Tuple[int, Tensor]]:
        """``(partition, positions)`` pairs covering ``ids``."""
        book = self.graph.node_book(node_type)
        return split_by_owner(ids, book.offsets, book.name)

    async def run_hop(self, plan: Plan, state: Optional[HopState] = None
                      ) -> Dict[int, HopResponse]:
        """One hop's requests, answered (:func:`pyg_dist.sampler._hop_round.run`)."""
        return await hop_round.run(self.group, self.local, self.meta, plan, state)

    async def _node_time(self, seeds: Dict[NodeType, Tensor]) -> Dict[NodeType, Tensor]:
        attr = self.config.time_attr
        missing = [t for t in seeds if attr not in self.meta.node_attrs.get(t, {})]
        if missing:
            raise ValueError(f"temporal node sampling needs seed times: pass them, or store "
                             f"node attribute '{attr}' for node type(s) {missing}")
        return {t: await self.node_times.of(t, ids) for t, ids in seeds.items()}

    # ---- batches, and PyG's BaseSampler interface --------------------------------------
    async def sample_nodes(self, inputs: NodeSamplerInput,
                           rng: Optional[np.random.Generator] = None) -> SampledBatch:
        """Samples a node-level batch: the subgraph around ``inputs.node`` and its seeds
        (``rng``: see :meth:`sample_subgraph`)."""
        node_type = self._input_node_type(inputs.input_type)
        seeds, time, input_id = inputs.node, inputs.time, inputs.input_id
        # a repeated seed is sampled once, as the first one, and put back after (as PyG)
        keep = None if self.config.disjoint else first_occurrences(seeds)
        sub = await self.sample_subgraph({node_type: seeds if keep is None else seeds[keep]},
                                         {node_type: time} if time is not None and
                                         self.config.disjoint else None, rng=rng)
        if keep is not None:
            sub = restore_repeats(sub, node_type, seeds, keep)
        return SampledBatch(sub, NodeSeeds(node_type, input_id, time, keep is not None))

    async def sample_edges(self, inputs: EdgeSamplerInput,
                           neg_sampling: Optional[NegativeSampling] = None,
                           rng: Optional[np.random.Generator] = None,
                           order: Optional[OrderKey] = None) -> SampledBatch:
        """Samples a link-level batch around the seed edges (and negatives); ``rng``
        also draws the negatives (default: torch's global generator); ``order``: the
        ids non-disjoint seeds are deduplicated in the order of (:data:`OrderKey`)."""
        return await sample_links(self, inputs, neg_sampling, rng, order)

    # PyG's interface speaks the dataset's original ids, in and out
    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs: object) -> Output:
        """PyG's interface, in original ids: ``index.node`` are the dataset's node ids
        (any owner); the ``SamplerOutput``/``HeteroSamplerOutput`` holds original ids in
        ``node`` and ``edge`` (``row``/``col`` index ``node``), with PyG's metadata."""
        return self.group.loop.run(self._from_nodes(index))

    def sample_from_edges(self, index: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None) -> Output:
        """PyG's interface, in original ids: ``index.row``/``index.col`` are the dataset's
        node ids; the output as :meth:`sample_from_nodes`."""
        return self.group.loop.run(self._from_edges(index, neg_sampling))

    async def _from_nodes(self, index: NodeSamplerInput) -> Output:
        node_type = self._input_node_type(index.input_type)
        node = await self._relabelled(node_type, index.node, "index.node")
        batch = await self.sample_nodes(NodeSamplerInput(index.input_id, node, index.time,
                                                         index.input_type))
        return await self._original_output(batch)

    async def _from_edges(self, index: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling]) -> Output:
        src, _, dst = self.meta.edge_type(index.input_type)
        row = await self._relabelled(src, index.row, "index.row")
        col = await self._relabelled(dst, index.col, "index.col")
        inputs = EdgeSamplerInput(index.input_id, row, col, index.label, index.time,
                                  index.input_type)
        batch = await self.sample_edges(inputs, neg_sampling, order=self.original_ids_of)
        return await self._original_output(batch)

    async def _relabelled(self, node_type: NodeType, ids: Tensor, argument: str) -> Tensor:
        """Relabelled ids of original node ids (any owner); raises naming ``argument``."""
        ids = check_ids(ids, self.meta.num_nodes[node_type], argument,
                        f"node type '{node_type}'")
        found = await relabel(self.group, self.local.ids, "node", node_type, ids)
        if bool((found < 0).any()):
            raise ValueError(f"{argument}: original ids {ids[found < 0][:5].tolist()} of "
                             f"node type '{node_type}' are in no partition")
        return found

    async def _original_output(self, batch: SampledBatch) -> Output:
        """PyG's output of a batch with its nodes' and edges' original ids: nodes' from
        their owners (one request per owner), edges' as sent with the hops."""
        sub = batch.subgraph
        asked = {t: v for t, v in sub.node.items() if v.numel()}
        got = await self.id_fetcher().fetch(asked, {}, unique=self.config.disjoint)
        node = {t: got.nodes[t][ID_ATTR] if t in asked else v for t, v in sub.node.items()}
        if sub.original_edge is None:
            raise RuntimeError("original edge ids were not sampled (original_ids=False)")
        sub = dataclasses.replace(sub, node=node, edge=sub.original_edge)
        return self.to_pyg(SampledBatch(sub, batch.seeds))

    @property
    def edge_permutation(self) -> None:
        return None

    def _input_node_type(self, input_type: Optional[NodeType]) -> NodeType:
        if input_type is None and self.is_hetero:
            raise ValueError("heterogeneous graph: the input needs an input_type (node type)")
        return self.meta.node_type(input_type)

    def to_pyg(self, batch: SampledBatch) -> Output:
        """PyG's ``SamplerOutput`` (homogeneous) or ``HeteroSamplerOutput``, with PyG's
        positional ``metadata`` made from the typed seed record."""
        sub, metadata = batch.subgraph, batch.seeds.pyg_metadata
        if not self.is_hetero:
            return SamplerOutput(
                node=sub.node[HOMO_NODE], row=sub.row[HOMO_EDGE], col=sub.col[HOMO_EDGE],
                edge=sub.edge[HOMO_EDGE],
                batch=sub.batch[HOMO_NODE] if sub.batch is not None else None,
                num_sampled_nodes=sub.num_sampled_nodes.get(HOMO_NODE),
                num_sampled_edges=sub.num_sampled_edges.get(HOMO_EDGE), metadata=metadata)
        return HeteroSamplerOutput(  # bidirectional: no edge ids or counts, as PyG's
            node=sub.node, row=sub.row, col=sub.col,
            edge={t: sub.edge.get(t) for t in sub.row}, batch=sub.batch,
            num_sampled_nodes=sub.num_sampled_nodes or None,
            num_sampled_edges=sub.num_sampled_edges or None, metadata=metadata)


def _at(values: Optional[Tensor], pos: Tensor, whole: bool) -> Optional[Tensor]:
    """``values[pos]`` (``values`` itself when ``pos`` is every position in order)."""
    return values if values is None or whole else values[pos]
