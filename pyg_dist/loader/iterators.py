"""The iterators of one pass over a :class:`~pyg_dist.loader.base.DistLoader`: in this
process on the asyncio loop, or over sampler worker processes. Both count the batches
they handed out (``yielded``), which the loader's ``state_dict`` reports."""
from __future__ import annotations

import collections
import concurrent.futures
from typing import TYPE_CHECKING, Any, Deque, Dict, List

from pyg_dist.loader.collate import Batch

if TYPE_CHECKING:
    from pyg_dist.loader.base import DistLoader


class _Iterator:
    def __iter__(self) -> "_Iterator":
        return self

    def close(self) -> None:
        raise NotImplementedError


class _LoopIterator(_Iterator):
    """Samples in this process on the asyncio loop, ``concurrency`` batches in flight."""

    def __init__(self, loader: "DistLoader", tasks: List[Any]) -> None:
        self.loader = loader
        self.tasks: Deque[Any] = collections.deque(tasks)
        self.yielded = 0
        self.pending: Deque[concurrent.futures.Future] = collections.deque()
        for _ in range(loader.concurrency):
            self._submit()

    def _submit(self) -> None:
        if self.tasks:
            coro = self.loader._producer.produce(self.tasks.popleft())
            self.pending.append(self.loader.sampler.group.loop.submit(coro))

    def __next__(self) -> Batch:
        if not self.pending:
            raise StopIteration
        future = self.pending.popleft()
        self._submit()
        try:
            batch = future.result(self.loader.batch_timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise TimeoutError(f"a batch took longer than {self.loader.batch_timeout:.0f}s") \
                from None
        except BaseException:
            self.close()
            raise
        self.yielded += 1
        return self.loader._finish(batch)

    def close(self) -> None:
        for future in self.pending:
            future.cancel()
        self.pending.clear()
        self.tasks.clear()


class _WorkerIterator(_Iterator):
    """Samples in worker processes; results are reordered to the seed order."""

    def __init__(self, loader: "DistLoader", tasks: List[Any], run: int) -> None:
        self.loader, self.tasks, self.run = loader, tasks, run
        self.pool = loader._worker_pool()
        self.sent = self.next_index = 0
        self.ready: Dict[int, Batch] = {}
        self._fill()

    def _fill(self) -> None:
        while self.sent < len(self.tasks) and self.sent - self.next_index < self.pool.capacity:
            self.pool.submit(self.run, self.sent, self.tasks[self.sent])
            self.sent += 1

    def __next__(self) -> Batch:
        if self.next_index >= len(self.tasks):
            raise StopIteration
        while self.next_index not in self.ready:
            run, index, produced, error = self.pool.get(self.loader.batch_timeout)
            if error is not None and run in (self.run, -1):
                raise RuntimeError(f"sampling failed in a worker process:\n{error}")
            if run == self.run:
                self.ready[index] = produced.batch
                self.loader._add_worker_cache(produced.cache)
        batch = self.ready.pop(self.next_index)
        self.next_index += 1
        self._fill()
        return self.loader._finish(batch)

    @property
    def yielded(self) -> int:
        return self.next_index

    def close(self) -> None:
        self.tasks = self.tasks[:self.sent]  # stale results are skipped by epoch
        self.next_index = len(self.tasks)
