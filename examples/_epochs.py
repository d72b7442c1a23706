"""The epoch loop of the examples: timing, loader wait, totals over ranks, ``fit``."""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

from _job import Job, all_sum, log
from pyg_dist.partition.progress import track


@dataclass
class EpochStats:
    """Totals of one epoch over every rank (loss and accuracy are means per seed)."""
    loss: float
    acc: float
    seconds: float
    batches: int
    wait_s: float

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0

    @property
    def wait_frac(self) -> float:
        """Fraction of the epoch the trainer was blocked waiting for the next batch."""
        return self.wait_s / self.seconds if self.seconds > 0 else 0.0


class TimedIter:
    """Iterates ``loader`` and adds up the time spent blocked in ``next()``."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.wait_s = 0.0
        self.batches = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        start = time.perf_counter()
        it = iter(self.loader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                self.wait_s += time.perf_counter() - start
                return
            self.wait_s += time.perf_counter() - start
            self.batches += 1
            yield batch
            start = time.perf_counter()


Step = Callable[[Any], Tuple[float, float, float]]  # batch -> (loss sum, correct, count)


def run_epoch(job: Job, loader: Any, step: Step, desc: str = "train") -> EpochStats:
    """One pass of ``loader`` through ``step``; totals are summed over ranks.

    Every rank runs the same number of batches (the loader pads), so DDP's
    per-batch gradient all-reduce never waits on a finished rank. Rank 0 shows progress
    within the epoch: a bar on a terminal, else a line every ``--log-every`` batches.
    """
    timed = TimedIter(loader)
    start = time.perf_counter()
    loss = correct = count = 0.0
    for batch in track(timed, desc, enabled=job.is_main and job.log_every > 0,
                       stream=sys.stdout, every=job.log_every):
        batch_loss, batch_correct, batch_count = step(batch)
        loss, correct, count = loss + batch_loss, correct + batch_correct, count + batch_count
    seconds = time.perf_counter() - start
    loss, correct, count, wait = all_sum(job, [loss, correct, count, timed.wait_s])
    world = job.ctx.world_size
    return EpochStats(loss / max(count, 1), correct / max(count, 1), seconds,
                      timed.batches, wait / world)


def summarize(job: Job, history: List[EpochStats]) -> Dict[str, float]:
    """Epoch timings for the JSON line (steady state: epochs after the first, if any)."""
    steady = history[1:] or history
    seconds = sum(h.seconds for h in steady)
    return {"epoch_s": round(seconds / len(steady), 4),
            "first_epoch_s": round(history[0].seconds, 4),
            "batches_per_epoch": history[-1].batches,
            "batches_per_s": round(sum(h.batches for h in steady) / max(seconds, 1e-9), 3),
            "loader_wait_frac": round(sum(h.wait_s for h in steady) / max(seconds, 1e-9), 4),
            "train_loss": round(history[-1].loss, 4), "train_acc": round(history[-1].acc, 4)}


def fit(job: Job, args: argparse.Namespace, loaders: Sequence[Any], step: Step,
        accuracy_of: Callable[[Any], float]) -> Dict[str, Any]:
    """``--epochs`` epochs of ``step`` over ``loaders[0]``, validation accuracy after
    each (``loaders[1]``) and test accuracy at the end (``loaders[2]``) when those
    exist; prints a progress line per epoch and returns the results for the JSON line."""
    history: List[EpochStats] = []
    val_acc = test_acc = float("nan")
    evaluate = len(loaders) >= 3
    for epoch in range(1, args.epochs + 1):
        stats = run_epoch(job, loaders[0], step, desc=f"epoch {epoch} train")
        history.append(stats)
        start = time.perf_counter()
        if evaluate:
            val_acc = accuracy_of(loaders[1])
        log(job, f"epoch {epoch:3d} | loss {stats.loss:.4f} | train acc {stats.acc:.4f} | "
                 f"val acc {val_acc:.4f} | epoch {stats.seconds:.2f}s "
                 f"({stats.batches_per_s:.1f} batches/s, waiting on loader "
                 f"{100 * stats.wait_frac:.0f}%) | eval {time.perf_counter() - start:.2f}s")
    if evaluate:
        test_acc = accuracy_of(loaders[2])
    log(job, f"test acc {test_acc:.4f}")
    return {"test_acc": round(test_acc, 4), "val_acc": round(val_acc, 4),
            **summarize(job, history)}
