"""The epoch loop of the examples: timing, loader wait, totals over ranks, ``fit``."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from _job import Job, all_sum, log
from pyg_dist import checkpoint
from pyg_dist.embedding import DistEmbedding, SparseOptimizer
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


class Checkpoints:
    """``--checkpoint-dir``/``--checkpoint-every`` of every example: resumes from the
    checkpoint if there is one, and saves every N training batches (or every epoch).

    Args:
        job, args: the example's job and arguments.
        model: the (DDP) model.
        optimizers: dense (``torch.optim``) and sparse (pyg_dist) optimizers.
        embeddings: ``DistEmbedding`` tables.
        loaders: the training loader first, then any others (their positions are saved).

    Hooks for the restart tests only, read from the environment when set:
    ``PYG_DIST_TEST_KILL_AT="epoch:batch"`` makes rank ``PYG_DIST_TEST_KILL_RANK``
    (default 1) SIGKILL itself after that training batch in torchrun's first incarnation;
    ``PYG_DIST_TEST_KILL_IN_SAVE=step`` makes it die in the middle of the save at that
    step (its files written, the version not yet published);
    ``PYG_DIST_TEST_SEED_LOG=DIR`` appends every trained batch's seed ids to
    ``DIR/seeds_rank<r>.jsonl``.
    """

    def __init__(self, job: Job, args: argparse.Namespace, model: torch.nn.Module,
                 optimizers: Sequence[Any], embeddings: Sequence[DistEmbedding] = (),
                 loaders: Sequence[Any] = ()) -> None:
        if args.checkpoint_every < 0:
            raise SystemExit(f"error: --checkpoint-every must be >= 0, got "
                             f"{args.checkpoint_every}")
        self.job, self.dir, self.every = job, args.checkpoint_dir, args.checkpoint_every
        self.objects = dict(
            model=model, embeddings=list(embeddings), loaders=list(loaders),
            optimizer=[o for o in optimizers if isinstance(o, torch.optim.Optimizer)],
            sparse_optimizers=[o for o in optimizers if isinstance(o, SparseOptimizer)])
        self.step = 0
        self.restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        kill_in_save = os.environ.get("PYG_DIST_TEST_KILL_IN_SAVE")
        self.kill_in_save = int(kill_in_save) if kill_in_save else None
        kill = os.environ.get("PYG_DIST_TEST_KILL_AT")
        self.kill_at = tuple(int(v) for v in kill.split(":")) if kill else None
        self.kill_rank = int(os.environ.get("PYG_DIST_TEST_KILL_RANK", "1"))
        seed_log = os.environ.get("PYG_DIST_TEST_SEED_LOG")
        self.seed_log = Path(seed_log) / f"seeds_rank{job.ctx.rank}.jsonl" if seed_log else None

    @property
    def first_epoch(self) -> int:
        """The epoch (1-based) training starts or resumes in."""
        loaders = self.objects["loaders"]
        return loaders[0].epoch + 1 if loaders else 1

    def resume(self) -> None:
        """Loads the checkpoint of ``--checkpoint-dir`` if there is one (collective)."""
        if not self.dir:
            return
        start = time.perf_counter()
        info = checkpoint.load(self.dir, **self.objects)
        if info is not None:
            self.job.checkpoint["checkpoint_load_s"] = round(time.perf_counter() - start, 4)
        if info is None:
            log(self.job, f"checkpoint: none in {self.dir} yet, starting from scratch "
                          f"(incarnation {self.restart})")
            return
        self.step = self.job.resumed_from = info.step
        epoch, batch = info.positions[0] if info.positions else (0, 0)
        how = "exactly" if info.exact else (f"from the next epoch's start: saved by "
                                            f"{info.world_size} ranks")
        log(self.job, f"checkpoint: resumed {how} at epoch {epoch + 1} batch {batch} step "
                      f"{info.step} (saved in incarnation {info.incarnation}; this is "
                      f"incarnation {self.restart}) from {info.path}")

    def after_batch(self, epoch: int, batch_in_epoch: int, batch: Any) -> None:
        """Counts the step; logs seeds, saves and kills when asked (see the class)."""
        self.step += 1
        if self.seed_log is not None:
            with open(self.seed_log, "a") as f:
                f.write(json.dumps({"inc": self.restart, "epoch": epoch, "step": self.step,
                                    "t": time.time(), "seeds": _seed_ids(batch)}) + "\n")
        if self.dir and self.every and self.step % self.every == 0:
            self.save(epoch)
        if self.kill_at == (epoch, batch_in_epoch):
            self._test_kill(f"at epoch {epoch} batch {batch_in_epoch} (step {self.step})")

    def _test_kill(self, where: str) -> None:
        if self.restart == 0 and self.job.ctx.rank == self.kill_rank:
            print(f"[rank {self.job.ctx.rank}] test hook: SIGKILL {where}", file=sys.stderr,
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def after_epoch(self, epoch: int) -> None:
        if self.dir and not self.every:
            self.save(epoch)

    def save(self, epoch: int) -> None:
        if self.kill_in_save == self.step:  # test hook: die once this rank's file is written
            write = checkpoint.files.write_rank_state

            def write_then_die(*args: Any, **kwargs: Any) -> None:
                write(*args, **kwargs)
                self._test_kill(f"while saving the checkpoint of step {self.step}")
            checkpoint.files.write_rank_state = write_then_die  # type: ignore[assignment]
        start = time.perf_counter()
        name = checkpoint.save(self.dir, step=self.step, extra={"epoch": epoch}, **self.objects)
        figures = self.job.checkpoint
        figures["checkpoint_saves"] = figures.get("checkpoint_saves", 0) + 1
        figures["checkpoint_save_s"] = round(figures.get("checkpoint_save_s", 0.0)
                                             + time.perf_counter() - start, 4)
        files = [f for f in (Path(self.dir) / name).rglob("*") if f.is_file()]
        figures["checkpoint_mb"] = round(sum(f.stat().st_size for f in files) / 1e6, 3)


def _seed_ids(batch: Any) -> List[int]:
    """Global ids of a node batch's seeds (its input positions for other batches)."""
    stores = [s for s in batch.node_stores if "batch_size" in s and "n_id" in s]
    if stores:
        return stores[0].n_id[:stores[0].batch_size].tolist()
    return batch.input_id.tolist()


def run_epoch(job: Job, loader: Any, step: Step, desc: str = "train",
              after_batch: Optional[Callable[[int, Any], None]] = None) -> EpochStats:
    """One pass of ``loader`` through ``step``; totals are summed over ranks.

    Every rank runs the same number of batches (the loader pads), so DDP's
    per-batch gradient all-reduce never waits on a finished rank. Rank 0 shows progress
    within the epoch: a bar on a terminal, else a line every ``--log-every`` batches.
    ``after_batch(i, batch)`` runs after the ``i``-th (1-based) step of the pass.
    """
    timed = TimedIter(loader)
    start = time.perf_counter()
    loss = correct = count = 0.0
    for batch in track(timed, desc, enabled=job.is_main and job.log_every > 0,
                       stream=sys.stdout, every=job.log_every):
        batch_loss, batch_correct, batch_count = step(batch)
        loss, correct, count = loss + batch_loss, correct + batch_correct, count + batch_count
        if after_batch is not None:
            after_batch(timed.batches, batch)
    seconds = time.perf_counter() - start
    loss, correct, count, wait = all_sum(job, [loss, correct, count, timed.wait_s])
    world = job.ctx.world_size
    return EpochStats(loss / max(count, 1), correct / max(count, 1), seconds,
                      timed.batches, wait / world)


def summarize(job: Job, history: List[EpochStats]) -> Dict[str, Any]:
    """Epoch timings for the JSON line (steady state: epochs after the first, if any)."""
    if not history:  # resumed after the last epoch: nothing left to train
        return {"epoch_s": None, "batches_per_epoch": 0}
    steady = history[1:] or history
    seconds = sum(h.seconds for h in steady)
    return {"epoch_s": round(seconds / len(steady), 4),
            "first_epoch_s": round(history[0].seconds, 4),
            "batches_per_epoch": history[-1].batches,
            "batches_per_s": round(sum(h.batches for h in steady) / max(seconds, 1e-9), 3),
            "loader_wait_frac": round(sum(h.wait_s for h in steady) / max(seconds, 1e-9), 4),
            "train_loss": round(history[-1].loss, 4), "train_acc": round(history[-1].acc, 4)}


def train_epochs(job: Job, args: argparse.Namespace, loader: Any, step: Step,
                 ckpt: Optional[Checkpoints]) -> Iterator[Tuple[int, EpochStats]]:
    """``(epoch, stats)`` of every epoch still to train (from where ``ckpt`` resumed),
    checkpointing as ``ckpt`` says. A resumed epoch's stats cover its remaining batches."""
    first = ckpt.first_epoch if ckpt is not None else 1
    for epoch in range(first, args.epochs + 1):
        hook = None
        if ckpt is not None:
            done = loader.state_dict()["batch"]  # > 0 in a resumed epoch
            hook = lambda i, b, e=epoch, d=done: ckpt.after_batch(e, d + i, b)  # noqa: E731
        stats = run_epoch(job, loader, step, desc=f"epoch {epoch} train", after_batch=hook)
        if ckpt is not None:
            ckpt.after_epoch(epoch)
        yield epoch, stats


class _CacheEpochs:
    """The feature cache's hit rate and bytes saved in each epoch (rank 0's loader)."""

    def __init__(self, loader: Any) -> None:
        on = getattr(getattr(loader, "sampler", None), "fetcher", None)
        self.loader = loader if on is not None and on.cache is not None else None
        self.seen = loader.cache_stats if self.loader is not None else None

    def line(self) -> str:
        if self.loader is None:
            return ""
        now = self.loader.cache_stats
        hits, rows = now.hits - self.seen.hits, now.remote_rows - self.seen.remote_rows
        saved = (now.bytes_saved - self.seen.bytes_saved) / 1e6
        self.seen = now
        return f" | cache hit {hits / max(hits + rows, 1):.3f}, saved {saved:.1f} MB"


def fit(job: Job, args: argparse.Namespace, loaders: Sequence[Any], step: Step,
        accuracy_of: Callable[[Any], float],
        ckpt: Optional[Checkpoints] = None) -> Dict[str, Any]:
    """``--epochs`` epochs of ``step`` over ``loaders[0]``, validation accuracy after
    each (``loaders[1]``) and test accuracy at the end (``loaders[2]``) when those
    exist; prints a progress line per epoch and returns the results for the JSON line.
    With ``ckpt``, training starts where its checkpoint left off and is checkpointed."""
    history: List[EpochStats] = []
    val_acc = test_acc = float("nan")
    evaluate = len(loaders) >= 3
    cached = _CacheEpochs(loaders[0])
    for epoch, stats in train_epochs(job, args, loaders[0], step, ckpt):
        history.append(stats)
        start = time.perf_counter()
        if evaluate:
            val_acc = accuracy_of(loaders[1])
        log(job, f"epoch {epoch:3d} | loss {stats.loss:.4f} | train acc {stats.acc:.4f} | "
                 f"val acc {val_acc:.4f} | epoch {stats.seconds:.2f}s "
                 f"({stats.batches_per_s:.1f} batches/s, waiting on loader "
                 f"{100 * stats.wait_frac:.0f}%) | eval {time.perf_counter() - start:.2f}s"
                 f"{cached.line()}")
    if evaluate:
        test_acc = accuracy_of(loaders[2])
    log(job, f"test acc {test_acc:.4f}")
    return {"test_acc": round(test_acc, 4), "val_acc": round(val_acc, 4),
            **summarize(job, history)}
