"""Where one batch's time goes: nanoseconds by stage and rows moved by source.

A batch being built records into a :class:`BatchTimes` that :func:`recording` makes
current for the code running it (a ``contextvars`` variable: every asyncio task has its
own, so batches in flight at once never mix their figures). The sampler and the
feature fetcher add to the current record, if any, with ``time.perf_counter_ns``
around whole stages: a few calls per hop and per fetch, nothing per edge or per row,
so the record stays on by default (``benchmarks/breakdown.py`` measures its cost).
Without a current record nothing is counted.

Stages of the producer (they do not overlap; their sum is at most ``produce_ns``):

- ``sample_ns``: the hops: splitting the frontier by owner, requests to peers, the
  kernels run here (of which ``kernel_ns``) and the wait for peers' answers;
- ``dedupe_ns``: merging each hop's answers: relabelling the neighbours (the hash
  table), the next frontier, and the batch's edge lists;
- ``fetch_own_ns`` / ``fetch_direct_ns``: rows gathered from this process's partition /
  from same-machine partitions read directly from their files;
- ``fetch_remote_ns``: waiting for peers' rows and copying them into the batch;
- ``fetch_other_ns``: the rest of the fetch (deduplicating ids, splitting them by
  owner, allocating the outputs, sending requests, the feature cache's rows);
- ``collate_ns``: labels and building the ``Data``/``HeteroData``.
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass, fields
from typing import Iterator, Optional, Tuple

now_ns = time.perf_counter_ns

#: the stages of a producer's batch, in the order they run
STAGES: Tuple[str, ...] = ("sample", "dedupe", "fetch_own", "fetch_direct", "fetch_remote",
                           "fetch_other", "collate")
#: where fetched rows came from
SOURCES: Tuple[str, ...] = ("own", "direct", "remote", "cached")


@dataclass
class BatchTimes:
    """One batch's figures, as its producer (trainer or sampler worker) saw them.

    Args:
        produce_ns: the whole batch, from its seeds to the collated batch.
        sample_ns, kernel_ns, dedupe_ns, fetch_own_ns, fetch_direct_ns, fetch_remote_ns,
            fetch_other_ns, collate_ns: the stages (see the module); ``kernel_ns`` is
            the part of ``sample_ns`` spent in sampling kernels run here.
        hops: hops run.
        seeds: seeds of the batch.
        rows_own, rows_direct, rows_remote, rows_cached: attribute rows fetched from
            each source (a row: one node or edge, all its attributes).
        bytes_own, bytes_direct, bytes_remote, bytes_cached: their bytes (remote ones
            as they crossed the network, i.e. in the wire type).
    """
    produce_ns: int = 0
    sample_ns: int = 0
    kernel_ns: int = 0
    dedupe_ns: int = 0
    fetch_own_ns: int = 0
    fetch_direct_ns: int = 0
    fetch_remote_ns: int = 0
    fetch_other_ns: int = 0
    collate_ns: int = 0
    hops: int = 0
    seeds: int = 0
    rows_own: int = 0
    rows_direct: int = 0
    rows_remote: int = 0
    rows_cached: int = 0
    bytes_own: int = 0
    bytes_direct: int = 0
    bytes_remote: int = 0
    bytes_cached: int = 0

    def as_tuple(self) -> Tuple[int, ...]:
        """The figures in field order (:data:`FIELDS`)."""
        return tuple(getattr(self, name) for name in FIELDS)

    def add_rows(self, source: str, rows: int, nbytes: int) -> None:
        """Counts ``rows`` rows of ``nbytes`` bytes fetched from ``source``."""
        setattr(self, f"rows_{source}", getattr(self, f"rows_{source}") + rows)
        setattr(self, f"bytes_{source}", getattr(self, f"bytes_{source}") + nbytes)


def lap(times: Optional[BatchTimes], stage: str, start: int) -> int:
    """Adds the nanoseconds since ``start`` to ``times.<stage>_ns`` (when a record is
    kept); returns now, the start of the next stage."""
    end = now_ns()
    if times is not None:
        name = f"{stage}_ns"
        setattr(times, name, getattr(times, name) + end - start)
    return end


class Laps:
    """Back-to-back stages of the current batch's record (if any): each call adds the
    time since the previous one (or since this was made) to a stage.

    Args:
        hops (int): hops this part of the batch runs (added to the record's ``hops``).
    """

    def __init__(self, hops: int = 0) -> None:
        self.times, self.last = current(), now_ns()
        if self.times is not None:
            self.times.hops += hops

    def __call__(self, stage: str) -> None:
        self.last = lap(self.times, stage, self.last)


def count_rows(times: Optional[BatchTimes], source: str, rows: int, nbytes: int) -> None:
    """:meth:`BatchTimes.add_rows` when a record is kept."""
    if times is not None:
        times.add_rows(source, rows, nbytes)


class FetchClock:
    """Splits one feature fetch's time into its stages, around what the fetch itself
    laps (``fetch_own``/``fetch_direct``, per share read here): :meth:`remote` when the
    rows read here are in (peers' replies are awaited from then on), :meth:`replies_in`
    when every reply is placed (``fetch_remote``), :meth:`finish` at the end: the rest
    of the fetch is ``fetch_other``."""

    def __init__(self) -> None:
        self.times = current()
        self.start = self.remote_start = self.remote_end = now_ns()
        self._here = self._here_ns()

    def _here_ns(self) -> int:
        t = self.times
        return t.fetch_own_ns + t.fetch_direct_ns if t is not None else 0

    def remote(self) -> None:
        """The rows read here are in; what follows waits for peers."""
        self.remote_start = now_ns()

    def replies_in(self) -> None:
        """Every peer's rows are placed."""
        self.remote_end = lap(self.times, "fetch_remote", self.remote_start)

    def finish(self) -> None:
        """The fetch is done: the time not lapped otherwise goes to ``fetch_other``."""
        if self.times is not None:
            here = self._here_ns() - self._here
            self.times.fetch_other_ns += now_ns() - self.start - here - (
                self.remote_end - self.remote_start)


#: the names of :class:`BatchTimes`' figures, in order
FIELDS: Tuple[str, ...] = tuple(f.name for f in fields(BatchTimes))

_CURRENT: contextvars.ContextVar[Optional[BatchTimes]] = contextvars.ContextVar(
    "pyg_dist_batch_times", default=None)


def current() -> Optional[BatchTimes]:
    """The record of the batch the calling code builds (``None``: none is kept)."""
    return _CURRENT.get()


@contextlib.contextmanager
def recording(times: Optional[BatchTimes] = None) -> Iterator[BatchTimes]:
    """Makes ``times`` (default: a new record) current inside the block, in this
    thread or asyncio task, and adds the block's duration to its ``produce_ns``."""
    times = times if times is not None else BatchTimes()
    token, start = _CURRENT.set(times), now_ns()
    try:
        yield times
    finally:
        times.produce_ns += now_ns() - start
        _CURRENT.reset(token)
