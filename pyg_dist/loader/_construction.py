"""Building a loader collectively: its context, its sampling options (its own, or those
of a sampler the caller built), the exchange every rank enters, and its number.

Every rank enters one exchange of what must match (the partitioning, sampling options,
worker count, the loader's number) and of its own batch count and errors, *before*
anyone joins RPC or starts workers. A mismatch, a rank without seeds, or a bad argument
on one rank raises on every rank, naming the rank and the field.

Loaders are numbered per RPC group in the order they are built (the same on every
rank); sampler worker groups are named after that number. The count is the loader
layer's: :func:`take_number` keeps it per group (the group compares by identity).
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional

from pyg_dist.loader._inputs import LoaderInput
from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._agreement import agree
from pyg_dist.rpc._context import DistContext, check_context
from pyg_dist.rpc._process_group import ensure_process_group
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
from pyg_dist.rpc._meeting import rendezvous_context
from pyg_dist.sampler._serving import partitioning, serving_group
from pyg_dist.store import LocalGraphStore

__all__ = ["loader_context", "sampling_options", "injected_options", "agree_loader",
           "take_number"]

#: the loaders' sampling options and their defaults
SAMPLING_DEFAULTS: Dict[str, Any] = dict(
    replace=False, subgraph_type="directional", disjoint=False, temporal_strategy="uniform",
    time_attr=None, weight_attr=None, sampling_strategy="neighbor", layer_dependency=False)

_NUMBERS: "weakref.WeakKeyDictionary[RpcGroup, int]" = weakref.WeakKeyDictionary()


def loader_context(ctx: Optional[DistContext]) -> DistContext:
    """``ctx``, else the context of the RPC group joined, else torchrun's environment."""
    if check_context(ctx) is not None:
        return ctx
    return runtime.current().ctx if runtime.is_initialized() else DistContext.from_env()


def served_data(data: Any, options: Dict[str, Any]) -> Any:
    """``data``, or for stores built in memory with a partition book the partition they
    are served as (collective: joins RPC, :func:`~pyg_dist.sampler._serving.serve_in_memory`),
    so loaders take PyG's in-memory stores as samplers do.

    Args:
        data: the loader's ``data``.
        options: the loader's keyword options (``current_ctx``, PyG's ``master_addr`` /
            ``master_port``).
    """
    if not isinstance(data, (tuple, list)) or len(data) != 2 or \
            not isinstance(data[1], LocalGraphStore) or data[1].is_partitioned:
        return data  # checked as the loader unpacks it
    ctx = rendezvous_context(loader_context(options.get("current_ctx")), options)
    _, local = serving_group(ctx, data[0], data[1])
    return local.features, local.graph


def sampling_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """The sampler keywords of a loader's sampling ``options`` (``num_neighbors`` and
    :data:`SAMPLING_DEFAULTS`' names); LABOR's two only when not at their defaults, so
    loader states saved before they existed stay loadable."""
    out = dict(options)
    if (out.get("sampling_strategy"), out.get("layer_dependency")) == ("neighbor", False):
        out.pop("sampling_strategy", None)
        out.pop("layer_dependency", None)
    return out


def injected_options(sampler: Any, given: Dict[str, Any], stores: tuple,
                     ctx: DistContext, num_workers: int) -> Dict[str, Any]:
    """The sampling options of a loader given ``sampler`` (``neighbor_sampler=``): the
    sampler's, with ``feature_cache`` and ``wire_dtype``.

    Raises:
        TypeError: ``sampler`` is not a :class:`DistNeighborSampler`.
        ValueError: it serves other stores or another rank, ``num_workers > 0`` (workers
            build their own samplers), or an option ``given`` to the loader differs
            from the sampler's, naming the option.
    """
    if not isinstance(sampler, DistNeighborSampler):
        raise TypeError(f"neighbor_sampler must be a DistNeighborSampler, got "
                        f"{type(sampler).__name__}")
    if sampler.features is not stores[0] or sampler.graph is not stores[1]:
        raise ValueError("neighbor_sampler samples other stores than the loader's data: "
                         "build it over the same (feature_store, graph_store)")
    if sampler.group.rank != ctx.rank:
        raise ValueError(f"neighbor_sampler belongs to rank {sampler.group.rank}, the loader "
                         f"to rank {ctx.rank}")
    if num_workers > 0:
        raise ValueError("a loader given neighbor_sampler samples in this process: use "
                         "num_workers=0 (sampler workers build their own samplers)")
    own = sampler.options
    for name, value in given.items():
        default = SAMPLING_DEFAULTS.get(name)
        if value is None or (name in SAMPLING_DEFAULTS and value == default):
            continue
        same = DistNeighborSampler.build_config(sampler.meta, value, **_flags(own)) \
            == sampler.config if name == "num_neighbors" else value == own.get(name)
        if not same:
            raise ValueError(f"the loader was given {name}={value!r} but its "
                             f"neighbor_sampler was built with {name}={own.get(name)!r}: "
                             f"leave it out or give the sampler's")
    return {"num_neighbors": own["num_neighbors"], **_flags(own)}


def _flags(options: Dict[str, Any]) -> Dict[str, Any]:
    return {k: options.get(k, v) for k, v in SAMPLING_DEFAULTS.items()}


def agree_loader(what: str, seeds: LoaderInput, stores: tuple, ctx: DistContext,
                 config: Any, feature_cache: bool, num_workers: int, even_batches: bool,
                 own: int, error: Optional[BaseException]) -> List[int]:
    """The collective exchange of building a loader; returns every rank's own batch count.

    Raises:
        DisagreementError: on every rank, when ranks disagree (naming the field).
        ValueError: on every rank, when a rank has no batch under ``even_batches``.
        Exception: a rank's own ``error``, on every rank.
    """
    if ctx.world_size == 1:
        if error is not None:
            raise error
        return [own]
    features, graph = stores
    must_match = {
        **partitioning(graph), "loader number": _next_number(),
        "kind": seeds.kind, "input type": seeds.input_type,
        "sampling options": repr(config), "negative sampling": repr(seeds.neg_sampling),
        "num_workers": num_workers, "even_batches": even_batches,
        # any cache seals every rank's store (its peers' caches hold its rows)
        "feature_cache (on or off)": feature_cache,
        "stored attributes": features.schema(), "labels set": features.labels is not None}
    cpu_group = runtime.current().cpu_group if runtime.is_initialized() else \
        ensure_process_group(ctx)
    infos = agree(what, must_match, ctx.world_size, cpu_group, info={"batches": own},
                  error=error)
    counts = [int(i["batches"]) for i in infos]
    empty = [r for r, c in enumerate(counts) if c == 0]
    if even_batches and empty and max(counts) > 0:
        raise ValueError(
            f"{what}: rank(s) {empty} have no seeds for a single batch while other ranks "
            f"have up to {max(counts)} batches; with even_batches=True every rank needs at "
            f"least one (e.g. node_split(..., force_even=True), or even_batches=False for "
            f"evaluation)")
    return counts


def take_number(group: RpcGroup) -> int:
    """The number of the loader built now in ``group`` (counts up, from 0)."""
    number = _NUMBERS.get(group, 0)
    _NUMBERS[group] = number + 1
    return number


def _next_number() -> int:
    """The number the next loader of this process's RPC group gets (0 before joining)."""
    return _NUMBERS.get(runtime.current(), 0) if runtime.is_initialized() else 0

