"""``DistLoader``: the epoch loop shared by the node and link loaders.

It shards nothing itself (seeds are given per rank, e.g. by ``node_split``); it
orders them per epoch, makes every rank yield the same number of batches, keeps a
bounded number of batches in flight (in-process on the asyncio loop, or in sampler
worker processes), and hands ``Data``/``HeteroData`` batches to the trainer.

Building a loader is collective: every rank enters one exchange of what must match
(the partitioning, sampling options, worker count, the loader's number) and of its
own batch count and errors, *before* anyone joins RPC or starts workers. A mismatch,
a rank without seeds, or a bad argument on one rank raises on every rank, naming the
rank and the field.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler import NegativeSampling

from pyg_dist.loader._arguments import check_device, check_loader_options, check_sizes
from pyg_dist.loader._collate import Batch
from pyg_dist.loader._compat import accept_pyg_options, rendezvous_context
from pyg_dist.loader._iterators import LoopIterator, PassIterator, WorkerIterator
from pyg_dist.loader._producer import BatchProducer, BatchTask, ProducerSpec
from pyg_dist.loader._seeds import EpochPlan
from pyg_dist.loader._state import VERSION, LoaderState, digest
from pyg_dist.loader._stats import LoaderStats, StatsRecorder
from pyg_dist.loader._workers import WorkerPool, WorkerSpec
from pyg_dist.rpc import _incarnation as incarnation, _runtime as runtime
from pyg_dist.rpc._agreement import agree
from pyg_dist.rpc._context import DistContext, check_context
from pyg_dist.rpc._process_group import ensure_process_group
from pyg_dist.sampler._cache.feature_cache import CacheStats
from pyg_dist.store._original_ids import BATCH_IDS, PartIds
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler, unpack_stores
from pyg_dist.sampler import _wire as wire
from pyg_dist.sampler._serving import partitioning
from pyg_dist.sampler._types import NumNeighbors
from pyg_dist.sampler._wire import WireSpec
from pyg_dist.store import LocalGraphStore
from pyg_dist._typing import EdgeType, NodeType

_LOCAL_ERRORS = (ValueError, TypeError, KeyError, IndexError, NotImplementedError)


@dataclass(frozen=True)
class LoaderSeeds:
    """What a subclass resolved from its seed arguments.

    Args:
        kind: ``"node"`` or ``"link"``.
        input_type: node type (node batches) or edge type (link batches) of the seeds.
        num_seeds: seeds this rank holds.
        neg_sampling: negative sampling of link batches.
    """
    kind: str
    input_type: Optional[Union[NodeType, EdgeType]]
    num_seeds: int
    neg_sampling: Optional[NegativeSampling] = None


class DistLoader:
    """Base of :class:`DistNeighborLoader` and :class:`DistLinkNeighborLoader`; holds the
    options both share (keyword-only; unknown names raise ``TypeError``).

    Subclasses keep their seed arguments, then call this; they provide
    ``_resolve(graph)`` (their :class:`LoaderSeeds`, raising on bad input) and
    ``_inputs(positions)`` (the sampler input of one batch).

    Args:
        batch_size, shuffle, drop_last: as in PyG (shuffle is seeded by ``seed + epoch``).
        current_ctx (DistContext): this process's context (default: from torchrun's env).
        num_workers (int): sampler processes (``0``: sample in this process); the same
            on every rank.
        concurrency (int): batches in flight (per worker with ``num_workers > 0``).
        device: move batches there (``cuda``: pinned memory, non-blocking copies).
        replace, subgraph_type, disjoint, temporal_strategy, time_attr, weight_attr,
            sampling_strategy, layer_dependency: see
            :class:`~pyg_dist.DistNeighborSampler` (the same on every rank;
            ``sampling_strategy="labor"``: layer-neighbour sampling).
        transform: applied to every batch.
        even_batches (bool): every rank yields the same number of batches (a rank with
            fewer repeats its own; every rank needs at least one). Needed for DDP
            training; evaluation may disable it.
        seed (int): base seed of shuffling (``seed + epoch``) and sampling (batch ``i`` of
            epoch ``e`` draws from ``(seed, e, i, rank)``, whatever ran before it, so
            :meth:`load_state_dict` resumes mid-epoch exactly).
        pin_memory (bool, optional): pin batches (default: when ``device`` is CUDA).
        feature_cache (int or float, optional): cache the node attributes of the remote
            nodes this partition's edges reference most (bytes, or a fraction of the
            halo nodes); see :class:`~pyg_dist.DistNeighborSampler`. Each sampler
            process (trainer or worker) holds its own copy.
        wire_dtype (optional): float32 attributes peers send as ``bfloat16`` or
            ``float16`` (half the bytes; values rounded to that type); a type for all,
            or a dict by attribute (:mod:`pyg_dist.sampler._wire`). Default: as stored.
        **pyg_options: the loader options of ``torch_geometric.distributed``
            (``master_addr``, ``master_port``, ``channel``, ``async_sampling``,
            ``persistent_workers``, ``filter_per_worker``, ``num_rpc_threads``,
            ``dist_sampler=None``), accepted so its scripts run
            unchanged; see :mod:`pyg_dist.loader._compat` for what each does here.
    """

    def __init__(self, data: tuple, num_neighbors: NumNeighbors, *, batch_size: int = 1,
                 shuffle: bool = False, drop_last: bool = False,
                 current_ctx: Optional[DistContext] = None, num_workers: int = 0,
                 concurrency: int = 2, device: Optional[Union[str, torch.device]] = None,
                 replace: bool = False, subgraph_type: str = "directional",
                 disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 transform: Optional[Callable[[Batch], Batch]] = None,
                 even_batches: bool = True, seed: int = 0,
                 pin_memory: Optional[bool] = None,
                 feature_cache: Union[int, float, None] = None, wire_dtype: WireSpec = None,
                 sampling_strategy: str = "neighbor", layer_dependency: bool = False,
                 **pyg_options: Any) -> None:
        self.features, self.graph = unpack_stores(data)
        self.ctx = rendezvous_context(_context(current_ctx), pyg_options)
        self._ids: Optional[PartIds] = None
        sampling = dict(num_neighbors=num_neighbors, replace=replace,
                        subgraph_type=subgraph_type, disjoint=disjoint,
                        temporal_strategy=temporal_strategy, time_attr=time_attr,
                        weight_attr=weight_attr)
        if (sampling_strategy, layer_dependency) != ("neighbor", False):  # states saved
            sampling.update(sampling_strategy=sampling_strategy,  # before stay loadable
                            layer_dependency=layer_dependency)
        error: Optional[BaseException] = None
        seeds, own, config = LoaderSeeds("node", None, 0), 0, None
        wire_spec = None
        try:
            accept_pyg_options(pyg_options, type(self).__name__)
            check_sizes(batch_size, num_workers, concurrency)
            check_loader_options(shuffle, drop_last, replace, disjoint, even_batches,
                                 pin_memory, seed, feature_cache, transform, device,
                                 time_attr, weight_attr)
            wire_spec = wire.normalize(wire_dtype)
            seeds = self._resolve(self.graph)
            config = DistNeighborSampler.build_config(self.graph.meta, **sampling)
            own = EpochPlan.local_batches(seeds.num_seeds, batch_size, drop_last)
        except _LOCAL_ERRORS as exc:  # raised on every rank by the agreement
            error = exc
        options = {"seed": seed, "feature_cache": feature_cache, "wire_dtype": wire_spec}
        self.spec = ProducerSpec({**sampling, **options},
                                 seeds.kind, seeds.input_type, seeds.neg_sampling)
        counts = self._agree(seeds, config, num_workers, even_batches, own, error)
        self._translate(self.ids)  # collective; the same error on every rank
        self.sampler = DistNeighborSampler(data, current_ctx=self.ctx, **self.spec.sampler_kwargs)
        group = self.sampler.group
        self.number, group.loaders = group.loaders, group.loaders + 1
        self.batch_size, self.num_workers, self.concurrency = batch_size, num_workers, concurrency
        self.device = check_device(device)
        self.pin_memory = pin_memory if pin_memory is not None else (
            self.device is not None and self.device.type == "cuda")
        self.transform = transform
        self.plan = EpochPlan(seeds.num_seeds, batch_size,
                              max(counts) if even_batches else own, shuffle, drop_last, seed)
        self._init_iteration_state()

    def _init_iteration_state(self) -> None:
        """No iteration yet: epoch 0, no position to resume, no sampler workers."""
        self.epoch = 0
        self._resume: Optional[LoaderState] = None  # set by load_state_dict
        self._position = (0, 0)  # (epoch, first batch) of the current iteration
        self._runs = itertools.count()  # tags worker results of each iteration
        self._producer = BatchProducer(self.sampler, self.spec)
        self._pool: Optional[WorkerPool] = None
        self._worker_cache = CacheStats()  # what the workers' feature caches did
        self._stats = StatsRecorder()  # every batch handed out: stage times, rows moved
        self._iterator: Optional[PassIterator] = None
        self.worker_threads = 1

    def _agree(self, seeds: LoaderSeeds, config: Any, num_workers: int, even_batches: bool,
               own: int, error: Optional[BaseException]) -> List[int]:
        """The collective exchange; returns every rank's own batch count."""
        what = type(self).__name__
        if self.ctx.world_size == 1:
            if error is not None:
                raise error
            return [own]
        must_match = {
            **partitioning(self.graph), "loader number": _loader_number(),
            "kind": seeds.kind, "input type": seeds.input_type,
            "sampling options": repr(config), "negative sampling": repr(seeds.neg_sampling),
            "num_workers": num_workers, "even_batches": even_batches,
            # any cache seals every rank's store (its peers' caches hold its rows)
            "feature_cache (on or off)": bool(self.spec.sampler_kwargs.get("feature_cache")),
            "stored attributes": self.features.schema(),
            "labels set": self.features.labels is not None}
        cpu_group = runtime.current().cpu_group if runtime.is_initialized() else \
            ensure_process_group(self.ctx)
        infos = agree(what, must_match, self.ctx.world_size, cpu_group,
                      info={"batches": own}, error=error)
        counts = [int(i["batches"]) for i in infos]
        empty = [r for r, c in enumerate(counts) if c == 0]
        if even_batches and empty and max(counts) > 0:
            raise ValueError(
                f"{what}: rank(s) {empty} have no seeds for a single batch while other ranks "
                f"have up to {max(counts)} batches; with even_batches=True every rank needs at "
                f"least one (e.g. node_split(..., force_even=True), or even_batches=False for "
                f"evaluation)")
        return counts

    @property
    def ids(self) -> PartIds:
        """The original ids of this rank's partition (:mod:`pyg_dist.store._original_ids`)."""
        if self._ids is None:
            self._ids = PartIds.of_stores(self.features, self.graph)
        return self._ids

    def _resolve(self, graph: LocalGraphStore) -> LoaderSeeds:
        raise NotImplementedError

    def _translate(self, table: PartIds) -> None:
        """Translates the seeds' original ids to relabelled ids (collective)."""
        raise NotImplementedError

    def _inputs(self, positions: Tensor) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.plan.num_batches

    @contextlib.contextmanager
    def enable_multithreading(self, num_threads: int) -> Iterator["DistLoader"]:
        """Torch threads of this loader's sampler workers started inside the block
        (``torch_geometric.distributed``'s name; workers start at the first iteration
        and keep their threads)."""
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or \
                num_threads < 1:
            raise ValueError(f"num_threads must be an integer >= 1, got {num_threads!r}")
        previous, self.worker_threads = self.worker_threads, int(num_threads)
        try:
            yield self
        finally:
            self.worker_threads = previous

    def __enter__(self) -> "DistLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        """Ends the current iteration (the workers stay for the next one)."""
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose shuffle the next iteration uses (default: counts up).
        A position loaded by :meth:`load_state_dict` is kept only for its own epoch."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Batch]:
        if self._iterator is not None:
            self._iterator.close()
        epoch, start = self.epoch, 0
        if self._resume is not None and self._resume.epoch == epoch:
            start = self._resume.batch
        self._resume = None
        seed, rank = self.spec.sampler_kwargs.get("seed") or 0, self.ctx.rank
        tasks = [BatchTask(self._inputs(p), (seed, epoch, i, rank))
                 for i, p in enumerate(self.plan.batches(epoch)) if i >= start]
        if self.num_workers > 0:
            self._iterator = WorkerIterator(tasks, next(self._runs), self._worker_pool(),
                                            self.batch_timeout, self._finish,
                                            self._add_worker_cache, self._stats)
        else:
            self._iterator = LoopIterator(tasks, self._producer.produce_timed,
                                          self.sampler.group.loop.submit, self.concurrency,
                                          self.batch_timeout, self._finish, self._stats)
        self._position = (epoch, start)
        self.epoch += 1
        return self._iterator

    # ---- position: state_dict / load_state_dict ----------------------------------------
    def _state(self, epoch: int, batch: int) -> LoaderState:
        if batch >= self.plan.num_batches:  # the epoch is over: the next one is due
            epoch, batch = epoch + 1, 0
        plan = self.plan
        return LoaderState(VERSION, self.spec.kind, epoch, batch, plan.num_batches,
                           plan.batch_size, plan.shuffle, plan.drop_last, plan.seed,
                           plan.num_seeds, digest(self._seed_ids()),
                           digest(sorted(self.spec.sampler_kwargs.items(), key=str)),
                           self.ctx.world_size, self.ctx.rank)

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position as plain values: the epoch of the next batch, the
        batches of that epoch already yielded, and what decides the batches (checked by
        :meth:`load_state_dict`). Take it after training on a batch: that batch counts
        as done. Sampler randomness needs no state (seeded per batch)."""
        if self._iterator is not None:
            epoch, start = self._position
            return self._state(epoch, start + self._iterator.yielded).to_dict()
        if self._resume is not None and self._resume.epoch == self.epoch:
            return self._resume.to_dict()
        return self._state(self.epoch, 0).to_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes at a position from :meth:`state_dict`: the next iteration yields exactly
        the batches of that epoch not yet yielded, later ones whole epochs as usual.

        Raises:
            ValueError: naming the field, when ``state`` is malformed or comes from a
                loader with other options, seeds or world size (or another rank).
        """
        loaded = LoaderState.from_dict(state, f"{type(self).__name__} state")
        loaded.check_matches(self._state(0, 0), f"{type(self).__name__} state")
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
        self.epoch, self._resume = loaded.epoch, loaded

    def _seed_ids(self) -> Tensor:
        raise NotImplementedError

    def _finish(self, batch: Batch) -> Batch:
        if self.transform is not None:
            batch = self.transform(batch)
        if self.pin_memory:
            batch = batch.pin_memory()
        if self.device is not None:
            batch = batch.to(self.device, non_blocking=True)
        for store in batch.node_stores:  # emb(batch.n_id) then translates nothing
            n_id, part = getattr(store, "n_id", None), getattr(store, "part_n_id", None)
            if isinstance(n_id, Tensor) and isinstance(part, Tensor):
                BATCH_IDS.remember(n_id, part)
        return batch

    @property
    def batch_timeout(self) -> float:
        return self.ctx.rpc_timeout * (self.sampler.num_hops + 3)

    @property
    def cache_stats(self) -> CacheStats:
        """What the feature cache did for this loader's batches since it was built (or
        :meth:`reset_cache_stats`): rows served from it, remote rows still fetched, bytes
        saved; counted in the sampler workers too."""
        if self.num_workers > 0:
            return dataclasses.replace(self._worker_cache)
        cache = self.sampler.fetcher.cache
        return dataclasses.replace(cache.stats) if cache is not None else CacheStats()

    def reset_cache_stats(self) -> CacheStats:
        """Returns :attr:`cache_stats` and starts counting afresh (e.g. once per epoch)."""
        stats, self._worker_cache = self.cache_stats, CacheStats()
        if self.sampler.fetcher.cache is not None:
            self.sampler.fetcher.cache.reset_stats()
        return stats

    def stats(self, reset: bool = False) -> LoaderStats:
        """Where this loader's time went since it was built (or reset): stage times of
        its batches (in sampler workers too), the loop's wait, rows moved by source.

        Args:
            reset (bool): start counting afresh after this call (e.g. once per epoch).

        Returns:
            :class:`~pyg_dist.loader._stats.LoaderStats` (``to_dict()``, ``split()``).
        """
        out = self._stats.summary()
        if reset:
            self._stats = StatsRecorder()
            if self._iterator is not None:
                self._iterator.stats = self._stats
        return out

    def _add_worker_cache(self, stats: Optional[CacheStats]) -> None:
        if stats is not None:
            self._worker_cache.hits += stats.hits
            self._worker_cache.remote_rows += stats.remote_rows
            self._worker_cache.bytes_saved += stats.bytes_saved

    def _worker_pool(self) -> WorkerPool:
        if self._pool is None:
            self.features.share_memory_()
            self.graph.share_memory_()
            self._pool = WorkerPool(self.num_workers, self._worker_spec, self.concurrency)
        return self._pool

    def _worker_spec(self, index: int) -> WorkerSpec:
        """Worker ``index`` of every rank forms one RPC group, named after the trainers'
        group and this loader's agreed number (the same on every rank)."""
        name = f"{self.sampler.group.name}_loader{self.number}w{index}"
        host, port = runtime.store_address(self.ctx)  # also without torchrun's env
        ctx = dataclasses.replace(self.ctx, master_addr=host, master_port=port,
                                  incarnation=incarnation.current(self.ctx))
        cache = self.sampler.fetcher.cache
        return WorkerSpec(ctx, name, self.features, self.graph, self.spec,
                          self.batch_timeout, index, self.worker_threads,
                          dict(self.sampler.group.direct_infos),
                          dataclasses.asdict(cache.file) if cache and cache.file else None)

    def close(self) -> None:
        """Stops iteration and sampler workers (they wait for their peers on other ranks)."""
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
        if self._pool is not None:
            self._pool.close(timeout=self.ctx.rpc_timeout + 10)
            self._pool = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to report to
            pass

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(batches={len(self)}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers}, rank={self.ctx.rank})")


def _context(ctx: Optional[DistContext]) -> DistContext:
    if check_context(ctx) is not None:
        return ctx
    return runtime.current().ctx if runtime.is_initialized() else DistContext.from_env()


def _loader_number() -> int:
    """The number the next loader of this process's RPC group gets (0 before joining)."""
    return runtime.current().loaders if runtime.is_initialized() else 0

