"""The iterators of one pass over a :class:`~pyg_dist.loader._base.DistLoader`: in this
process on the asyncio loop, or over sampler worker processes. Both count the batches
they handed out (``yielded``), which the loader's ``state_dict`` reports. They are given
what they use (callables, the pool, the timeout), not the loader that builds them."""
from __future__ import annotations

import collections
import concurrent.futures
from typing import Any, Awaitable, Callable, Deque, Dict, List, Optional

from pyg_dist.loader._collate import Batch
from pyg_dist.loader._producer import Produced
from pyg_dist.loader._stats import StatsRecorder
from pyg_dist.loader._workers import WorkerPool
from pyg_dist.sampler import _timing as timing
from pyg_dist.sampler._cache.feature_cache import CacheStats


class PassIterator:
    """One pass over a loader's batches; ``yielded`` counts those handed out, and
    ``stats`` (when given) records each with the training loop's wait for it."""
    yielded: int
    stats: Optional[StatsRecorder] = None
    _mark: int = 0  # when the loop last got a batch (or the pass started)

    def __iter__(self) -> "PassIterator":
        return self

    def _hand_out(self, produced: Produced, asked: int, got: int,
                  finish: Callable[[Batch], Batch]) -> Batch:
        """``finish`` applied to a produced batch, recorded (``asked``/``got``: when
        the loop asked for it and when it was there)."""
        batch = finish(produced.batch)
        if self.stats is not None:
            end = timing.now_ns()
            self.stats.add(produced.times, got - asked, end - got)
            self.stats.add_elapsed(end - (self._mark or asked))
            self._mark = end
        return batch

    def close(self) -> None:
        raise NotImplementedError


class LoopIterator(PassIterator):
    """Samples in this process on the asyncio loop, ``concurrency`` batches in flight.

    Args:
        tasks: the pass's batch tasks, in order.
        produce: a task's coroutine producing its batch (:class:`Produced`).
        submit: runs a coroutine on the loop, returning a ``concurrent.futures.Future``.
        concurrency: batches in flight.
        timeout: seconds a batch may take.
        finish: applied to every batch handed out (transform, pinning, device).
        stats: records every batch handed out.
    """

    def __init__(self, tasks: List[Any], produce: Callable[[Any], Awaitable[Produced]],
                 submit: Callable[[Awaitable[Produced]], concurrent.futures.Future],
                 concurrency: int, timeout: float, finish: Callable[[Batch], Batch],
                 stats: Optional[StatsRecorder] = None) -> None:
        self.produce, self.submit, self.timeout, self.finish = produce, submit, timeout, finish
        self.stats, self._mark = stats, timing.now_ns()
        self.tasks: Deque[Any] = collections.deque(tasks)
        self.yielded = 0
        self.pending: Deque[concurrent.futures.Future] = collections.deque()
        for _ in range(concurrency):
            self._submit()

    def _submit(self) -> None:
        if self.tasks:
            self.pending.append(self.submit(self.produce(self.tasks.popleft())))

    def __next__(self) -> Batch:
        if not self.pending:
            raise StopIteration
        future = self.pending.popleft()
        self._submit()
        asked = timing.now_ns()
        try:
            produced = future.result(self.timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise TimeoutError(f"a batch took longer than {self.timeout:.0f}s") from None
        except BaseException:
            self.close()
            raise
        self.yielded += 1
        return self._hand_out(produced, asked, timing.now_ns(), self.finish)

    def waiting(self) -> bool:
        """Whether batches of this pass are still to be handed out."""
        return bool(self.pending or self.tasks)

    def close(self) -> None:
        for future in self.pending:
            future.cancel()
        self.pending.clear()
        self.tasks.clear()


class WorkerIterator(PassIterator):
    """Samples in worker processes; results are reordered to the seed order.

    Args:
        tasks: the pass's batch tasks, in order.
        run: this pass's number (results of earlier passes are skipped).
        pool: the loader's sampler workers.
        timeout: seconds a batch may take.
        finish: applied to every batch handed out (transform, pinning, device).
        add_cache_stats: receives what a worker's feature cache did for a batch.
        stats: records every batch handed out (with its worker's stage times).
    """

    def __init__(self, tasks: List[Any], run: int, pool: WorkerPool, timeout: float,
                 finish: Callable[[Batch], Batch],
                 add_cache_stats: Callable[[Optional[CacheStats]], None],
                 stats: Optional[StatsRecorder] = None) -> None:
        self.tasks, self.run, self.pool, self.timeout = tasks, run, pool, timeout
        self.finish, self.add_cache_stats = finish, add_cache_stats
        self.stats, self._mark = stats, timing.now_ns()
        self.sent = self.next_index = 0
        self.ready: Dict[int, Produced] = {}
        self._fill()

    def _fill(self) -> None:
        while self.sent < len(self.tasks) and self.sent - self.next_index < self.pool.capacity:
            self.pool.submit(self.run, self.sent, self.tasks[self.sent])
            self.sent += 1

    def __next__(self) -> Batch:
        if self.next_index >= len(self.tasks):
            raise StopIteration
        asked = timing.now_ns()
        while self.next_index not in self.ready:
            run, index, produced, error = self.pool.get(self.timeout)
            if error is not None and run in (self.run, -1):
                raise RuntimeError(f"sampling failed in a worker process:\n{error}")
            if run == self.run:
                self.ready[index] = produced
                self.add_cache_stats(produced.cache)
        produced = self.ready.pop(self.next_index)
        self.next_index += 1
        got = timing.now_ns()
        self._fill()
        return self._hand_out(produced, asked, got, self.finish)

    @property
    def yielded(self) -> int:
        return self.next_index

    def waiting(self) -> bool:
        """Whether batches of this pass are still to be handed out."""
        return self.next_index < len(self.tasks)

    def close(self) -> None:
        self.tasks = self.tasks[:self.sent]  # stale results are skipped by epoch
        self.next_index = len(self.tasks)


class BatchChannel:
    """PyG's ``loader.channel``, read-only: whether batches are waiting to be handed out
    (pyg_dist's loaders hand batches out through their own queues; nothing is put in
    from outside).

    Args:
        current (Callable): the loader's current pass iterator, or ``None``.
    """

    def __init__(self, current: Callable[[], Optional[PassIterator]]) -> None:
        self._current = current

    def empty(self) -> bool:
        """``True`` when no batch of the current pass is left to hand out."""
        it = self._current()
        return it is None or not it.waiting()
