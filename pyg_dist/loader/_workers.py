"""Sampler worker processes: each joins an RPC group of its own (worker ``i`` of every
rank together), serves its rank's partition from shared memory, and builds batches.

Workers are forked from a fork server of their trainer (``multiprocessing``'s
``forkserver``): started once per trainer, it imports the training script (as a spawned
worker would), pyg_dist and its numba kernels (:data:`PRELOAD`), then forks every worker
of every loader of that trainer. A fresh interpreter per worker spent ~8 s of CPU on the
same imports, and held its own copy of every module; forked workers share the server's
pages. The server is single-threaded, so the fork is safe. Each worker runs in its
trainer's environment as it was when the worker started (variables read while importing,
e.g. ``NUMBA_NUM_THREADS``, were read when the server started).
``PYG_DIST_WORKER_START=spawn`` gives every worker a fresh interpreter instead.

Tasks and batches travel through two one-way pipes per worker (tensors in shared
memory, by ``torch.multiprocessing``'s reductions). Pipes, unlike ``multiprocessing``
queues, need no named semaphores: a queue's three live as ``/dev/shm/sem.mp-*`` files
that only a clean exit removes, so every trainer stopped or killed left them behind. A
worker whose trainer is gone sees its task pipe close and exits. Workers live as long as
their loader and leave their RPC group together (a graceful shutdown), so a rank that
finishes early keeps serving.
"""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import traceback
from multiprocessing.connection import Connection, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import torch
import torch.multiprocessing as tmp

from pyg_dist.loader._producer import BatchProducer, ProducerSpec
from pyg_dist.rpc import _health as health, _runtime as runtime
from pyg_dist.rpc._context import DistContext
from pyg_dist.sampler._cache.feature_cache import CacheStats
from pyg_dist.store import LocalFeatureStore, LocalGraphStore


@dataclass
class WorkerSpec:
    """What a worker needs (sent once, at start; stores travel in shared memory)."""
    ctx: DistContext
    group: str
    features: LocalFeatureStore
    graph: LocalGraphStore
    producer: ProducerSpec
    batch_timeout: float
    index: int
    threads: int = 1
    direct: Dict[int, Dict[str, Any]] = field(default_factory=dict)  # as the trainer chose
    cache: Optional[Dict[str, Any]] = None  # the machine's shared feature cache file, if any


#: the run number of a worker's first message: it started (its imports went well)
STARTED = -2


def _worker_main(spec: WorkerSpec, tasks: Connection, results: Connection,
                 env: Dict[str, str]) -> None:
    os.environ.clear()  # forked: the server's environment is from when it started
    os.environ.update(env)  # the trainer's, its launcher's variables left out
    results.send((STARTED, spec.index, None, None))
    torch.set_num_threads(spec.threads)
    from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
    from pyg_dist.sampler import _direct as direct
    from pyg_dist.sampler._local import serving_objects
    from pyg_dist.sampler._cache.shared import attach
    from pyg_dist.store._source import FileId
    from pyg_dist.sampler._warmup import warm_up_for

    warm_up_for(spec.producer.sampler_kwargs.get("sampling_strategy", "neighbor"),
                spec.graph.meta)  # before joining: no peer waits on this worker's compiler
    group = runtime.join_rpc(spec.ctx, spec.graph.num_parts,
                             serving_objects(spec.features, spec.graph), group=spec.group)
    direct.reuse(group, spec.direct)  # the same partitions its trainer reads directly
    graceful = True
    try:
        kwargs = dict(spec.producer.sampler_kwargs)
        kwargs["seed"] = (kwargs.get("seed") or 0) * 1_000_003 + spec.index + 1  # own stream
        if spec.cache is not None:  # map the trainer's, do not build one more
            kwargs["feature_cache"] = None
        sampler = DistNeighborSampler((spec.features, spec.graph), current_ctx=spec.ctx,
                                      **kwargs)
        if spec.cache is not None:
            sampler.fetcher.cache = attach(sampler.fetcher, FileId(**spec.cache))
        producer = BatchProducer(sampler, spec.producer)
        _serve_tasks(group, producer, spec, tasks, results)
    except BaseException:
        graceful = False
        _send(results, (-1, -1, None, traceback.format_exc()))
        raise
    finally:
        runtime.shutdown_rpc(graceful=graceful)


def _delta(cache: Any, before: Optional[CacheStats]) -> Optional[CacheStats]:
    if cache is None or before is None:
        return None
    now = cache.stats
    return CacheStats(now.hits - before.hits, now.remote_rows - before.remote_rows,
                      now.bytes_saved - before.bytes_saved)


def _send(results: Connection, message: Any) -> None:
    try:
        results.send(message)
    except OSError:  # the trainer is gone: nobody to tell
        pass


def _serve_tasks(group: runtime.RpcGroup, producer: BatchProducer, spec: WorkerSpec,
                 tasks: Connection, results: Connection) -> None:
    parent = mp.parent_process()
    while True:
        try:
            if not tasks.poll(1.0):
                if parent is not None and not parent.is_alive():
                    raise RuntimeError("the trainer process died; sampler worker exits")
                continue
            task = tasks.recv()
        except (EOFError, OSError):
            raise RuntimeError("the trainer process closed its pipe (it died); sampler "
                               "worker exits") from None
        if task is None:
            return
        epoch, index, batch_task = task
        try:
            cache = producer.sampler.fetcher.cache
            before = dataclasses.replace(cache.stats) if cache is not None else None
            produced = group.loop.run(producer.produce_timed(batch_task),
                                      timeout=spec.batch_timeout)
            produced.cache = _delta(cache, before)
            results.send((epoch, index, produced, None))
        except Exception:  # reported to the trainer, which raises it
            results.send((epoch, index, None, f"sampler worker {os.getpid()} of rank "
                          f"{spec.ctx.rank}:\n{traceback.format_exc()}"))


# torchrun's description of the trainer. Workers get theirs from WorkerSpec.ctx (its
# incarnation included); hiding these keeps a spawned worker that re-runs an unguarded
# training script (no ``if __name__ == "__main__":``) from joining the trainers'
# rendezvous as a duplicate rank: it fails on its own instead, and the trainer reports
# it. ``TORCHELASTIC_RESTART_COUNT`` and ``TORCHELASTIC_RUN_ID`` stay: alone they make
# no rank, and code running in a worker may want to know which restart it is in.
_LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT")
_START_HINT = ("a worker that dies while starting usually means the training script runs "
               "its code at import time: sampler workers import it again (their fork "
               "server does, once), so put the training code under "
               "`if __name__ == \"__main__\":`")
#: what the fork server of a trainer's sampler workers imports before forking them
PRELOAD = ["__main__", "pyg_dist.loader._workers", "pyg_dist.loader._preload"]
START_METHODS = ("forkserver", "spawn")


def start_method() -> str:
    """How sampler workers start: ``PYG_DIST_WORKER_START``, ``"forkserver"`` by default
    (forked from one server per trainer) or ``"spawn"`` (a fresh interpreter each)."""
    value = os.environ.get("PYG_DIST_WORKER_START", "forkserver").strip().lower()
    if value not in START_METHODS:
        raise ValueError(f"PYG_DIST_WORKER_START must be one of {START_METHODS}, not "
                         f"{value!r}")
    return value


def worker_context() -> Any:
    """The ``multiprocessing`` context sampler workers start from (:func:`start_method`)."""
    method = start_method()
    ctx = tmp.get_context(method)
    if method == "forkserver":  # takes effect when the server starts (its first worker)
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


@contextmanager
def _launcher_env_hidden() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in _LAUNCHER_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


class WorkerPool:
    """``num_workers`` sampler processes with a task pipe and a result pipe each.

    Args:
        num_workers: processes to start.
        make_spec: builds the :class:`WorkerSpec` of worker ``i``.
        prefetch: batches in flight per worker.
    """

    def __init__(self, num_workers: int, make_spec: Any, prefetch: int = 2) -> None:
        ctx = worker_context()
        self.prefetch = prefetch
        self.procs: List[Any] = []
        self.tasks: List[Connection] = []
        self.results: List[Connection] = []
        self.started: Set[int] = set()  # workers whose first message came
        try:
            for i in range(num_workers):
                self._start(ctx, i, make_spec(i))
        except BaseException:
            self.close(timeout=1)
            raise

    def _start(self, ctx: Any, index: int, spec: WorkerSpec) -> None:
        task_out, task_in = ctx.Pipe(duplex=False)
        result_out, result_in = ctx.Pipe(duplex=False)
        with _launcher_env_hidden():
            env = dict(os.environ)
        proc = ctx.Process(target=_worker_main, args=(spec, task_out, result_in, env),
                           daemon=True, name=f"pyg_dist-sampler-{index}")
        try:
            with _launcher_env_hidden():
                proc.start()
        except (EOFError, ConnectionError) as exc:  # the fork server died while starting
            raise RuntimeError(f"sampler worker {index} could not start: the fork server "
                               f"that forks sampler workers died while importing the "
                               f"training script ({exc!r}; its error is on stderr); "
                               f"{_START_HINT}") from None
        finally:  # the child has its ends now (or never will): a dead peer reads as EOF
            task_out.close()
            result_in.close()
        self.procs.append(proc)
        self.tasks.append(task_in)
        self.results.append(result_out)

    @property
    def capacity(self) -> int:
        return self.prefetch * len(self.procs)

    def submit(self, epoch: int, index: int, inputs: Any) -> None:
        try:
            self.tasks[index % len(self.procs)].send((epoch, index, inputs))
        except OSError:  # its pipe closed: the worker is gone
            raise self._dead_error() from None

    def get(self, timeout: float) -> Tuple[int, int, Any, Optional[str]]:
        """The next finished batch; raises if a worker died or nothing came in time."""
        waited = 0.0
        while True:
            for conn in wait(self.results, timeout=1.0):
                try:
                    message = conn.recv()
                except (EOFError, OSError):  # the worker is gone
                    for proc in self.procs:
                        proc.join(1.0)
                    raise self._dead_error() from None
                if message[0] == STARTED:
                    self.started.add(message[1])
                    continue
                return message
            waited += 1.0
            if any(not p.is_alive() for p in self.procs):
                raise self._dead_error()
            if waited >= timeout:
                raise TimeoutError(f"no batch from the sampler workers within {timeout:.0f}s")

    def _dead_error(self) -> RuntimeError:
        """Why a worker is gone: one that died before its first message could not even
        import the training script; a later death says its exit code."""
        dead = [(i, p) for i, p in enumerate(self.procs) if not p.is_alive()] or \
            list(enumerate(self.procs))
        never = [p.name for i, p in dead if i not in self.started]
        message = (f"sampler worker(s) {[p.name for _, p in dead]} died (exit codes "
                   f"{[p.exitcode for _, p in dead]}; their errors are on stderr)")
        if never:
            message += f"; {never} died while starting: {_START_HINT}"
        return RuntimeError(health.with_diagnosis(message))

    def close(self, timeout: float) -> None:
        """Stops the workers (they leave their RPC groups together) and reaps them."""
        for conn in self.tasks:
            try:
                conn.send(None)
            except OSError:  # that worker is gone already
                pass
        for proc in self.procs:
            proc.join(timeout)
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in self.tasks + self.results:
            conn.close()
        self.procs, self.tasks, self.results = [], [], []
