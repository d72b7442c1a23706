"""Where a loader's time went: per-batch stage times and rows moved, added up for users.

Every batch's producer (the trainer's event loop, or a sampler worker) records a
:class:`~pyg_dist.sampler._timing.BatchTimes`; the batch carries it to the trainer,
whose iterator adds what it saw itself: how long the training loop waited for the
batch (``wait``) and the loader's last steps on it (``finish``: transform, pinning, the
copy to the device). :meth:`StatsRecorder.summary` turns the records into a
:class:`LoaderStats` (``loader.stats()``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from pyg_dist.sampler import _timing as timing

#: the producer's stages (:mod:`pyg_dist.sampler._timing`), then the trainer's own
STAGES: Tuple[str, ...] = timing.STAGES + ("produce", "kernel", "wait", "finish")


@dataclass
class StageTime:
    """One stage over the batches counted.

    Args:
        total_s (float): seconds, summed over the batches.
        mean_ms (float): milliseconds per batch, the mean.
        median_ms (float): milliseconds per batch, the median.
    """
    total_s: float = 0.0
    mean_ms: float = 0.0
    median_ms: float = 0.0


@dataclass
class RowsMoved:
    """Attribute rows fetched from one source over the batches counted.

    Args:
        rows (int): rows (one node or edge with all its attributes).
        bytes (int): their bytes (rows from peers: as they crossed the network).
    """
    rows: int = 0
    bytes: int = 0


@dataclass
class LoaderStats:
    """Where a loader's time went since it was built (or its stats were reset).

    Args:
        batches (int): batches handed to the training loop.
        seeds (int): their seeds (seed nodes, or seed edges of link batches).
        elapsed_s (float): the training loop's time from the start of each pass over
            the loader to its last batch handed out (training time included).
        stages (dict): :class:`StageTime` by stage. Per batch, in its producer (the
            trainer's event loop, or a sampler worker with ``num_workers > 0``):
            ``sample`` (the hops: requests, kernels and waiting for peers),
            ``dedupe`` (relabelling each hop's neighbours, edge lists),
            ``fetch_own`` / ``fetch_direct`` / ``fetch_remote`` (rows of this process's
            partition / of same-machine partitions read from their files / from peers,
            waiting included), ``fetch_other`` (deduplicating and splitting ids,
            allocating outputs), ``collate`` (labels, building the batch); they do not
            overlap and add up to at most ``produce``, the whole batch. ``kernel`` is
            the part of ``sample`` spent in sampling kernels run here. In the training
            loop: ``wait`` (time the loop waited for the batch) and ``finish``
            (transform, pinning, copy to the device).
        rows (dict): :class:`RowsMoved` by source: ``own``, ``direct`` (same-machine
            partitions read from their files), ``remote`` (peers), ``cached`` (the
            feature cache).
    """
    batches: int = 0
    seeds: int = 0
    elapsed_s: float = 0.0
    stages: Dict[str, StageTime] = field(default_factory=dict)
    rows: Dict[str, RowsMoved] = field(default_factory=dict)

    @property
    def seeds_per_s(self) -> float:
        """Seeds handed out per second of :attr:`elapsed_s`."""
        return self.seeds / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict:
        """Plain values (for a JSON line)."""
        return {**asdict(self), "seeds_per_s": self.seeds_per_s}

    def split(self) -> str:
        """The stages' share of the producers' time, and the loop's wait per batch:
        ``sample 41% dedupe 12% fetch 30% (own 30 direct 0 remote 0) collate 4% |
        wait 3.1 ms/batch``."""
        produce = self.stages.get("produce", StageTime()).total_s
        if not self.batches or produce <= 0:
            return "no batches yet"

        def pct(*names: str) -> float:
            return 100 * sum(self.stages[n].total_s for n in names) / produce
        fetch = ("fetch_own", "fetch_direct", "fetch_remote", "fetch_other")
        return (f"sample {pct('sample'):.0f}% dedupe {pct('dedupe'):.0f}% fetch "
                f"{pct(*fetch):.0f}% (own {pct('fetch_own'):.0f} direct "
                f"{pct('fetch_direct'):.0f} remote {pct('fetch_remote'):.0f}) collate "
                f"{pct('collate'):.0f}% | {self.stages['produce'].mean_ms:.1f} ms/batch, "
                f"wait {self.stages['wait'].mean_ms:.1f} ms/batch")


_TIMES = len(timing.FIELDS)


class StatsRecorder:
    """The records of the batches a loader handed out; cheap to add to (a tuple per
    batch), summed up only when asked."""

    def __init__(self) -> None:
        self.records: List[Tuple[int, ...]] = []
        self.elapsed_ns = 0

    def add(self, times: Optional[timing.BatchTimes], wait_ns: int, finish_ns: int) -> None:
        """Records one batch handed out (``times``: its producer's record, if any)."""
        base = times.as_tuple() if times is not None else (0,) * _TIMES
        self.records.append(base + (wait_ns, finish_ns))

    def add_elapsed(self, ns: int) -> None:
        """Adds the training loop's time of (part of) a pass over the loader."""
        self.elapsed_ns += ns

    def summary(self) -> LoaderStats:
        """The records so far as a :class:`LoaderStats`."""
        names = timing.FIELDS + ("wait_ns", "finish_ns")
        table = np.array(self.records, dtype=np.int64).reshape(-1, len(names))
        column = {name: table[:, i] for i, name in enumerate(names)}
        stages = {}
        for stage in STAGES:
            values = column[f"{stage}_ns"] / 1e6
            stages[stage] = StageTime(
                float(values.sum()) / 1e3,
                float(values.mean()) if values.size else 0.0,
                float(np.median(values)) if values.size else 0.0)
        rows = {s: RowsMoved(int(column[f"rows_{s}"].sum()), int(column[f"bytes_{s}"].sum()))
                for s in timing.SOURCES}
        return LoaderStats(len(self.records), int(column["seeds"].sum()),
                           self.elapsed_ns / 1e9, stages, rows)
