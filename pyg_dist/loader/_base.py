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
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.loader._arguments import check_device, check_loader_options, check_sizes
from pyg_dist.loader._collate import Batch
from pyg_dist.loader._compat import accept_pyg_options, rendezvous_context
from pyg_dist.loader._construction import (agree_loader, injected_options, loader_context,
                                          sampling_options, take_number)
from pyg_dist.loader._inputs import LOCAL_ERRORS, LoaderInput
from pyg_dist.loader._iterators import BatchChannel, LoopIterator, PassIterator, WorkerIterator
from pyg_dist.loader._producer import BatchProducer, BatchTask, ProducerSpec
from pyg_dist.loader._seeds import EpochPlan
from pyg_dist.loader._transfer import DeviceTransfer
from pyg_dist.loader._state import VERSION, LoaderState, digest
from pyg_dist.loader._stats import LoaderStats, StatsRecorder
from pyg_dist.loader._workers import WorkerPool, WorkerSpec
from pyg_dist.rpc import _incarnation as incarnation, _runtime as runtime
from pyg_dist.rpc._context import DistContext
from pyg_dist.sampler import _direct as direct, _wire as wire
from pyg_dist.sampler._cache.feature_cache import CacheStats
from pyg_dist.store._original_ids import BATCH_IDS, PartIds
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
from pyg_dist.sampler._stores import unpack_stores
from pyg_dist.sampler._types import NumNeighbors, SamplingConfig
from pyg_dist.sampler._warmup import warm_up_for
from pyg_dist.sampler._wire import WireSpec

class DistLoader:
    """Base of :class:`DistNeighborLoader` and :class:`DistLinkNeighborLoader`; holds the
    options both share (keyword-only; unknown names raise ``TypeError``).

    Subclasses resolve their seed arguments first (a
    :class:`~pyg_dist.loader._inputs.LoaderInput`, holding any error of bad input) and
    pass them here; this constructor calls nothing of the subclass.

    Args:
        data: ``(feature_store, graph_store)`` of this rank's partition.
        num_neighbors: fan-out per hop (``None`` only with ``neighbor_sampler``).
        seeds (LoaderInput): the resolved seeds.
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
            Without sampler workers a batch's rows are then gathered straight into
            reused page-locked buffers, so no extra copy is made to pin them.
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
        neighbor_sampler (DistNeighborSampler, optional): a sampler built by the caller
            over ``data``, used instead of building one (as PyG's ``NeighborLoader``);
            its options decide the sampling, and options given to the loader must equal
            them; ``num_workers`` must be ``0``.
    """

    def __init__(self, data: tuple, num_neighbors: Optional[NumNeighbors],
                 seeds: LoaderInput, *, batch_size: int = 1,
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
                 neighbor_sampler: Optional[DistNeighborSampler] = None,
                 **pyg_options: Any) -> None:
        self.features, self.graph = unpack_stores(data)
        self.ctx = rendezvous_context(loader_context(current_ctx), pyg_options)
        self.seeds, self._ids = seeds, seeds.table
        given = dict(num_neighbors=num_neighbors, replace=replace,
                     subgraph_type=subgraph_type, disjoint=disjoint,
                     temporal_strategy=temporal_strategy, time_attr=time_attr,
                     weight_attr=weight_attr, sampling_strategy=sampling_strategy,
                     layer_dependency=layer_dependency)
        cache = dict(feature_cache=feature_cache, wire_dtype=wire_dtype)
        error: Optional[BaseException] = None
        sampling, config, own = sampling_options(given), None, 0
        try:
            accept_pyg_options(pyg_options, type(self).__name__)
            check_sizes(batch_size, num_workers, concurrency)
            check_loader_options(shuffle, drop_last, replace, disjoint, even_batches,
                                 pin_memory, seed, feature_cache, transform, device,
                                 time_attr, weight_attr)
            sampling, config = self._sampling(given, cache, neighbor_sampler, num_workers)
            own = EpochPlan.local_batches(seeds.num_seeds, batch_size, drop_last)
        except LOCAL_ERRORS as exc:  # raised on every rank by the agreement
            error = exc
        self.spec = ProducerSpec({**sampling, "seed": seed, **cache},
                                 seeds.kind, seeds.input_type, seeds.neg_sampling)
        if config is not None:  # LABOR's kernels too, before any peer may ask for them
            warm_up_for(config.sampling_strategy, self.graph.meta)
        counts = agree_loader(type(self).__name__, seeds, (self.features, self.graph),
                              self.ctx, config, bool(cache["feature_cache"]), num_workers,
                              even_batches, own, error)
        seeds.translate(self.ids, (self.features, self.graph), self.ctx)  # collective
        self.sampler = neighbor_sampler if neighbor_sampler is not None else \
            DistNeighborSampler(data, current_ctx=self.ctx, **self.spec.sampler_kwargs)
        self.number = take_number(self.sampler.group)
        self.batch_size, self.num_workers, self.concurrency = batch_size, num_workers, concurrency
        self.device = check_device(device)
        self.pin_memory = pin_memory if pin_memory is not None else (
            self.device is not None and self.device.type == "cuda")
        self._transfer = DeviceTransfer(self.device, self.pin_memory)
        if self.pin_memory and num_workers == 0 and self.device is not None and \
                self.device.type == "cuda":  # rows gathered straight into pinned buffers
            self.sampler.fetcher.outputs.pin()
        self.transform = transform
        self.plan = EpochPlan(seeds.num_seeds, batch_size,
                              max(counts) if even_batches else own, shuffle, drop_last, seed)
        self._init_iteration_state()

    def _sampling(self, given: Dict[str, Any], cache: Dict[str, Any],
                  sampler: Optional[DistNeighborSampler], num_workers: int
                  ) -> Tuple[Dict[str, Any], SamplingConfig]:
        """The sampler keywords and checked sampling config: the loader's options
        (``given``), or the options of ``sampler`` given by the caller. Sets ``cache``'s
        ``feature_cache`` and ``wire_dtype`` (normalised) to the ones in use.

        Raises:
            ValueError, TypeError: a bad option, seed argument or sampler.
        """
        if sampler is not None:
            sampling = sampling_options(injected_options(
                sampler, {**given, **cache}, (self.features, self.graph), self.ctx,
                num_workers))
            cache.update((k, sampler.options[k]) for k in ("feature_cache", "wire_dtype"))
        else:
            sampling = sampling_options(given)
        cache["wire_dtype"] = wire.normalize(cache["wire_dtype"])
        if self.seeds.error is not None:
            raise self.seeds.error
        return sampling, DistNeighborSampler.build_config(self.graph.meta, **sampling)

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

    @property
    def ids(self) -> PartIds:
        """The original ids of this rank's partition (:mod:`pyg_dist.store._original_ids`)."""
        if self._ids is None:
            self._ids = PartIds.of_stores(self.features, self.graph)
        return self._ids

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
        tasks = [BatchTask(self.seeds.inputs(p), (seed, epoch, i, rank))
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
                           plan.num_seeds, digest(self.seeds.seed_ids),
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

    def _finish(self, batch: Batch) -> Batch:
        if self.transform is not None:
            batch = self.transform(batch)
        batch = self._transfer(batch)
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
                          dict(direct.of(self.sampler.group).chosen),
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

    @property
    def dist_sampler(self) -> DistNeighborSampler:
        """The loader's sampler (PyG's name for it)."""
        return self.sampler

    @property
    def channel(self) -> BatchChannel:
        """PyG's ``channel``: ``loader.channel.empty()`` tells whether batches of the
        current pass are still waiting."""
        return BatchChannel(lambda: self._iterator)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(pid={os.getpid()}, batches={len(self)}, "
                f"batch_size={self.batch_size}, num_workers={self.num_workers}, "
                f"rank={self.ctx.rank})")

