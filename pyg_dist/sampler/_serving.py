"""Joining the job as a server of one partition (collective on first use).

Before any rank serves, the ranks agree on the partitioning: every rank must hold a
partition of the *same* partitioned graph (``PartitionMeta.uid``, derived from its
content), the one its rank is meant to serve. Two folders of the same graph made with
another seed, or one rewritten during the job, are refused on every rank, never
sampled into silently wrong batches. Numba kernels are compiled (or loaded from
numba's cache) before joining, so no peer waits on a compiler.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._context import DistContext
from pyg_dist.rpc._meeting import rendezvous_context
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler import (_direct as direct, _id_lookup as id_lookup, _link as link,
                              _local as local, _node_times as node_times)
from pyg_dist.sampler._local import LocalSampler, serving_objects
from pyg_dist.sampler._warmup import warm_up
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._memory_partition import MemoryPlan, build_partition, plan_partition

#: the modules defining the callees a process serving a partition answers
#: (``sampler.hop`` and ``sampler.features`` in local, ``sampler.has_edges`` in link,
#: ``graph.find_ids`` in id_lookup, ``sampler.earliest_node`` in node_times): importing
#: them registered those callees with :mod:`pyg_dist.rpc._registry`
CALLEE_MODULES = (local, link, id_lookup, node_times)


def check_stores(ctx: DistContext, features: LocalFeatureStore, graph: LocalGraphStore) -> None:
    """Raises if the stores are not the partition this rank is meant to serve."""
    if features.part != graph.part:
        raise ValueError(f"feature store holds partition {features.part} but graph store holds "
                         f"partition {graph.part}")
    if features.meta.uid != graph.meta.uid:
        raise ValueError(f"feature store and graph store come from different partitionings "
                         f"(uid {features.meta.uid[:12]} vs {graph.meta.uid[:12]})")
    want = ctx.partition_id(graph.num_parts)
    if graph.part != want:
        raise ValueError(f"rank {ctx.rank} of {ctx.world_size} must load partition {want} of "
                         f"{graph.num_parts} (ranks are assigned to partitions in contiguous "
                         f"blocks), but its stores hold partition {graph.part}")


def partitioning(graph: LocalGraphStore) -> Dict[str, Any]:
    """What every rank must agree on about the graph it serves."""
    return {"partitioning (META.json uid)": graph.meta.uid, "num_parts": graph.num_parts}


def init_rpc(ctx: Optional[DistContext] = None,
             data: Optional[Tuple[LocalFeatureStore, LocalGraphStore]] = None,
             num_parts: Optional[int] = None, *, current_ctx: Optional[DistContext] = None,
             master_addr: Optional[str] = None, master_port: Optional[int] = None,
             **pyg_options: Any) -> RpcGroup:
    """Joins the trainers' RPC group, serving ``data`` (collective: every rank calls it).

    PyG's call ``init_rpc(current_ctx=ctx, master_addr=HOST, master_port=PORT)`` works
    too: without a process group, the ranks meet at ``HOST:PORT`` (as PyG's did);
    PyG's ``num_rpc_threads``, ``rpc_timeout`` and ``rpc_worker_names`` are accepted
    with no effect (the context's timeout and pyg_dist's thread count apply, and peers
    meet through the process group).

    Args:
        ctx: this process's context (default: :meth:`DistContext.from_env`).
        data: ``(feature_store, graph_store)`` of this rank's partition, or ``None``
            for jobs without a graph (e.g. only :class:`DistEmbedding`).
        num_parts: partitions when ``data`` is ``None`` (default: one per rank).
        current_ctx: PyG's name of ``ctx``.
        master_addr, master_port: where the ranks meet when no process group exists.

    Raises:
        DisagreementError: on every rank, if the ranks hold different partitionings.
        TypeError: for an argument neither pyg_dist nor PyG has.
    """
    unknown = set(pyg_options) - {"num_rpc_threads", "rpc_timeout", "rpc_worker_names"}
    if unknown:
        raise TypeError(f"init_rpc() got unexpected keyword argument(s) {sorted(unknown)}")
    if ctx is not None and current_ctx is not None and ctx is not current_ctx:
        raise TypeError("init_rpc(): the context was given twice (ctx and current_ctx)")
    ctx = ctx or current_ctx or DistContext.from_env()
    ctx = rendezvous_context(ctx, {"master_addr": master_addr, "master_port": master_port})
    if data is None:
        return runtime.join_rpc(ctx, num_parts or ctx.world_size)
    features, graph = data
    error: Optional[BaseException] = None
    try:
        check_stores(ctx, features, graph)
    except ValueError as exc:  # raised on every rank by the agreement
        error = exc
    warm_up()
    group = runtime.join_rpc(ctx, graph.num_parts, serving_objects(features, graph),
                             must_match=partitioning(graph), error=error)
    _agree_serving(group, features, graph, None)
    return group


def _agree_serving(group: RpcGroup, features: LocalFeatureStore, graph: LocalGraphStore,
                   error: Optional[BaseException]) -> None:
    """Every rank tells the others what it serves (collective; ``error`` raised on every
    rank), then same-machine reads are chosen (:mod:`pyg_dist.sampler._direct`)."""
    if not group.ctx.is_distributed:
        if error is not None:
            raise error
        return
    infos = group.agree("serving a partition", partitioning(graph),
                        info=direct.serving_info(group.ctx, features, graph), error=error)
    direct.attach(group, features, graph, infos)


def serving_group(ctx: Optional[DistContext], features: LocalFeatureStore,
                  graph: LocalGraphStore) -> Tuple[RpcGroup, LocalSampler]:
    """The RPC group serving this partition, joining it first if needed (collective).
    Stores built in memory are served as the partition their book gives them
    (:func:`serve_in_memory`); the :class:`LocalSampler` holds the stores served."""
    if not (features.is_partitioned and graph.is_partitioned):
        return serve_in_memory(ctx, features, graph)
    if not runtime.is_initialized():
        group = init_rpc(ctx, (features, graph))
        return group, group.served["sampler"]
    group = runtime.current()
    if ctx is not None and ctx.rank != group.rank:
        raise ValueError(f"current_ctx is rank {ctx.rank} but this process joined RPC as "
                         f"rank {group.rank}")
    sampler = group.served.get("sampler")
    if sampler is None:
        _start_serving(group, features, graph)
        return group, group.served["sampler"]
    if sampler.graph is graph and sampler.features is features:
        return group, sampler
    if not group.ctx.is_distributed:  # standalone: serve the stores given now
        group.served.update(serving_objects(features, graph))
        return group, group.served["sampler"]
    if sampler.graph.part != graph.part or sampler.graph.meta.uid != graph.meta.uid:
        raise ValueError(f"this process already serves partition {sampler.graph.part} of "
                         f"another graph to its peers; call shutdown_rpc() before switching "
                         f"to partition {graph.part} of a different graph")
    return group, sampler


def _start_serving(group: RpcGroup, features: LocalFeatureStore,
                   graph: LocalGraphStore) -> None:
    """Serves a partition in a group joined without one (collective: the agreement is
    also the barrier after which peers may ask)."""
    error: Optional[BaseException] = None
    try:
        check_stores(group.ctx, features, graph)
        if group.num_parts != graph.num_parts:
            raise ValueError(f"RPC was initialised for {group.num_parts} partition(s), the "
                             f"stores hold one of {graph.num_parts}")
    except ValueError as exc:
        error = exc
    warm_up()
    if error is None:  # before the agreement: peers may ask as soon as it returns
        group.served.update(serving_objects(features, graph))
    try:
        _agree_serving(group, features, graph, error)
    except BaseException:
        for key in ("graph", "features", "sampler"):
            group.served.pop(key, None)
        raise


#: what a graph store built in memory was served as: ``(feature store, graph store)``
SERVED_AS = "_served_as"


def serve_in_memory(ctx: Optional[DistContext], features: LocalFeatureStore,
                    graph: LocalGraphStore) -> Tuple[RpcGroup, LocalSampler]:
    """Serves stores built in memory with a partition book set by hand (collective).

    Every rank checks its stores alone (:func:`plan_partition`), joins RPC if it has not,
    and tells the others its edge counts; then each builds the partition it serves
    (:func:`build_partition`) and serves it as a partition opened from a folder. An
    error on one rank (e.g. no ``node_pb``) is raised on every rank. The pair is built
    once: later samplers over the same stores share it, and the feature store refuses
    ``put`` from then on (its rows were copied into the partition).
    """
    built = graph.__dict__.get(SERVED_AS)
    if built is not None and built[0] is not None:
        return serving_group(ctx, *built)
    plan: Optional[MemoryPlan] = None
    error: Optional[BaseException] = None
    try:
        plan = plan_partition(features, graph)
    except ValueError as exc:  # raised on every rank by the exchange
        error = exc
    if runtime.is_initialized():
        group = runtime.current()
    else:
        ctx = rendezvous_context(ctx or DistContext.from_env(), {})
        parts = plan.num_parts if plan is not None else graph.num_partitions
        group = runtime.join_rpc(ctx, parts if isinstance(parts, int) else ctx.world_size,
                                 error=error)
    infos = group.agree("serving stores built in memory",
                        plan.must_match() if plan is not None else {},
                        info=plan.info() if plan is not None else None, error=error)
    built = build_partition(plan, infos)
    graph.__dict__[SERVED_AS] = built
    features.seal(f"it was copied into partition {plan.part} served to the other ranks "
                  f"(a sampler was built over it); put before building samplers")
    _start_serving(group, *built)
    return group, group.served["sampler"]
