"""The collectives of multi-machine partitioning: numpy arrays over gloo.

Every call is collective: all ranks make the same calls in the same order. A failed
collective (a peer died, or did not come within the job's timeout) raises
:class:`~pyg_dist.rpc._agreement.PeerFailedError` naming the step and, through the
health watchdog's heartbeats, the rank that failed or went silent. A one-rank
:class:`ArrayComm` needs no process group, so the whole pipeline also runs in one process.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from pyg_dist.rpc import _health as health
from pyg_dist.rpc._agreement import PeerFailedError
from pyg_dist.memory import release_free_memory

T = TypeVar("T")


class ArrayComm:
    """This rank's place among ``world`` ranks, and array collectives between them.

    Args:
        rank (int): this rank.
        world (int): ranks taking part (the default process group's, when > 1).
    """

    def __init__(self, rank: int = 0, world: int = 1) -> None:
        if world > 1 and not dist.is_initialized():
            raise RuntimeError("a ArrayComm of several ranks needs the default process group "
                               "(pyg_dist.init_process_group)")
        self.rank, self.world = rank, world

    def _run(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except RuntimeError as exc:
            raise PeerFailedError(_named(
                f"{what}: the exchange with the other ranks failed ({exc})")) from exc

    def alltoallv(self, arrays: Sequence[np.ndarray], what: str) -> List[np.ndarray]:
        """Sends ``arrays[j]`` to rank ``j``; returns what every rank sent here, by rank.

        All arrays (on every rank) must share one dtype and row shape.
        """
        if self.world == 1:
            return [np.asarray(arrays[0])]
        first = np.asarray(arrays[0])
        dtype, row = first.dtype, first.shape[1:]
        row_bytes = dtype.itemsize * int(np.prod(row, dtype=np.int64))
        sends = [np.ascontiguousarray(a, dtype=dtype).reshape(-1, *row) for a in arrays]
        counts = torch.tensor([a.shape[0] for a in sends], dtype=torch.int64)
        recv_counts = torch.empty(self.world, dtype=torch.int64)
        self._run(what, lambda: dist.all_to_all_single(recv_counts, counts))
        payload = np.concatenate([a.reshape(-1).view(np.uint8) for a in sends]) \
            if row_bytes else np.empty(0, dtype=np.uint8)
        recv = recv_counts.tolist()
        out = torch.empty(sum(recv) * row_bytes, dtype=torch.uint8)
        self._run(what, lambda: dist.all_to_all_single(
            out, torch.from_numpy(payload), [c * row_bytes for c in recv],
            [int(c) * row_bytes for c in counts.tolist()]))
        data = out.numpy().view(dtype).reshape(-1, *row)
        return np.split(data, np.cumsum(recv)[:-1])

    def allreduce(self, array: np.ndarray, what: str, op: str = "sum") -> np.ndarray:
        """The element-wise sum (or ``"max"``) of ``array`` over ranks (int64 or float64)."""
        array = np.asarray(array)
        if self.world == 1:
            return array.copy()
        tensor = torch.from_numpy(np.ascontiguousarray(array).copy())
        reduce_op = dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX
        self._run(what, lambda: dist.all_reduce(tensor, op=reduce_op))
        return tensor.numpy()

    def allgather(self, value: Any, what: str) -> List[Any]:
        """Every rank's (small, picklable) ``value``, by rank."""
        if self.world == 1:
            return [value]
        out: List[Any] = [None] * self.world
        self._run(what, lambda: dist.all_gather_object(out, value))
        return out

    def check(self, what: str, error: Optional[BaseException]) -> None:
        """Collective: raises this rank's ``error``, or on the others one naming the rank
        that failed, so a failure on one rank stops every rank at the same step."""
        everyone = self.allgather(None if error is None else f"{type(error).__name__}: {error}",
                                  what)
        if error is not None:
            raise error
        failed = [f"rank {r}: {e}" for r, e in enumerate(everyone) if e]
        if failed:
            raise PeerFailedError(f"{what} failed on other rank(s): " + "; ".join(failed))

    def rounds(self, blocks: Iterator[T], what: str) -> Iterator[Optional[T]]:
        """Yields this rank's blocks, then ``None`` while other ranks still have some:
        every rank runs the same number of bounded exchange rounds."""
        while True:
            block = next(blocks, None)
            more = self.allreduce(np.array([block is not None], dtype=np.int64), what, "max")
            if not more[0]:
                release_free_memory()  # the rounds' buffers, kept by the allocator
                return
            yield block


def _named(message: str) -> str:
    """``message`` with the health watchdog's line on the rank that failed or went silent,
    waiting a few heartbeats for it: a killed peer breaks the connection at once, but is
    known to be silent only when its heartbeat stops moving."""
    dog = health.running()
    deadline = time.monotonic() + (4 * dog.config.interval + 1 if dog is not None else 0)
    while not health.diagnose() and time.monotonic() < deadline:
        time.sleep(0.2)
    return health.with_diagnosis(message)


def split_by(dest: np.ndarray, world: int, *arrays: np.ndarray) -> List[List[np.ndarray]]:
    """Rows of each of ``arrays`` grouped by destination rank ``dest`` (order kept within
    a rank): ``out[i][j]`` is what ``arrays[i]`` sends to rank ``j``."""
    order = np.argsort(dest, kind="stable")
    cuts = np.cumsum(np.bincount(dest, minlength=world))[:-1]
    return [np.split(np.asarray(a)[order], cuts) for a in arrays]


def route(comm: ArrayComm, dest: np.ndarray, arrays: Sequence[np.ndarray], what: str
          ) -> List[np.ndarray]:
    """Sends every row of each of ``arrays`` to rank ``dest[row]``; returns, per array,
    the rows received (from rank 0 first, each rank's rows in their order)."""
    pieces = split_by(np.asarray(dest, dtype=np.int64), comm.world, *arrays)
    return [np.concatenate(comm.alltoallv(p, what)) for p in pieces]


def home_of(ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The rank whose range ``[bounds[r], bounds[r + 1])`` holds each id."""
    return np.searchsorted(bounds, ids, side="right").astype(np.int64) - 1


def even_bounds(total: int, world: int) -> np.ndarray:
    """``world + 1`` bounds splitting ``[0, total)`` into near-equal ranges."""
    return np.array([total * r // world for r in range(world + 1)], dtype=np.int64)


def lookup(comm: ArrayComm, keys: np.ndarray, bounds: np.ndarray,
           answer: Callable[[np.ndarray], np.ndarray], what: str,
           sorted_keys: bool = False) -> np.ndarray:
    """Values of ``keys`` held by their home ranks (``bounds``): each home is asked for
    its keys and gives ``answer(keys)``; the replies come back in ``keys``' order.
    ``sorted_keys``: ``keys`` are ascending (no permutation is needed)."""
    keys = np.asarray(keys, dtype=np.int64)
    if sorted_keys:
        cuts = np.searchsorted(keys, bounds[1:-1])
        asked = comm.alltoallv(np.split(keys, cuts), what)
        return np.concatenate(comm.alltoallv([answer(k) for k in asked], what))
    dest = home_of(keys, bounds)
    order = np.argsort(dest, kind="stable")
    cuts = np.cumsum(np.bincount(dest, minlength=comm.world))[:-1]
    asked = comm.alltoallv(np.split(keys[order], cuts), what)
    replies = comm.alltoallv([answer(k) for k in asked], what)
    got = np.concatenate(replies)
    out = np.empty_like(got)
    out[order] = got
    return out
