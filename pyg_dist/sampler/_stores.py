"""The ``(feature store, graph store)`` a sampler is given: checked, and for stores built
in memory with a partition book, what one rank knows of the graph before it serves
them (:func:`~pyg_dist.sampler._serving.serve_in_memory`)."""
from __future__ import annotations

from typing import Optional, Tuple

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._context import DistContext
from pyg_dist.sampler._serving import serving_group
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._memory_partition import options_meta, plan_partition


def options_meta_of(ctx: Optional[DistContext], features: LocalFeatureStore,
                    graph: LocalGraphStore) -> PartitionMeta:
    """What one rank knows of a graph built in memory (enough to check sampling
    options; the partition it serves is built as it binds,
    :func:`~pyg_dist.sampler._serving.serve_in_memory`).

    Raises:
        ValueError: stores that cannot be served; on every rank when this process is
            in an RPC group already (the error travels with the exchange).
    """
    try:
        return options_meta(plan_partition(features, graph))
    except ValueError:
        if runtime.is_initialized():
            serving_group(ctx, features, graph)  # raises it on every rank
        raise


def unpack_stores(data: object, in_memory: bool = False
                  ) -> Tuple[LocalFeatureStore, LocalGraphStore]:
    """``(feature store, graph store)`` of ``data``; with ``in_memory``, stores built in
    memory given a partition book (``graph_store.node_pb``) are accepted too (the
    sampler serves them as the partition the book gives,
    :func:`~pyg_dist.sampler._serving.serve_in_memory`).

    Raises:
        TypeError: ``data`` is not such a pair.
        ValueError: stores built in memory where they cannot be used.
    """
    if (not isinstance(data, (tuple, list)) or len(data) != 2
            or not isinstance(data[0], LocalFeatureStore)
            or not isinstance(data[1], LocalGraphStore)):
        raise TypeError("data must be a (LocalFeatureStore, LocalGraphStore) pair, got "
                        f"{type(data).__name__}")
    if in_memory and not data[1].is_partitioned:
        return data[0], data[1]  # checked as planned (plan_partition)
    if not (data[0].is_partitioned and data[1].is_partitioned):
        raise ValueError("data: stores built in memory (LocalFeatureStore() / from_data) "
                         "have no partitioning; pyg_dist's samplers and loaders need stores "
                         "opened with from_partition (write one with Partitioner, one "
                         "partition for one machine)")
    return data[0], data[1]
