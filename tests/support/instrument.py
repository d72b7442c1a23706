"""Runs a training script with test faults and benchmark figures attached from outside.

The trainers (``benchmarks/trainers/``) and the examples are plain scripts: no test
hooks, no benchmark fields. Tests and benchmarks run them through this wrapper instead,
under ``torchrun``::

    torchrun --nproc-per-node=2 ... tests/support/instrument.py --kill-at 3:3 \\
        --seed-log DIR -- benchmarks/trainers/node_classification.py --partition-dir ...

It patches public entry points before the script starts (the training loader's
iteration, ``pyg_dist.checkpoint.save``/``load``, ``pyg_dist.shutdown_rpc`` and
``pyg_dist.loop.finish``'s call of it), runs the script as ``__main__``, and at its end prints one line per rank,
``instrument: {"rank": r, ...}`` (not starting with ``{``: the example's JSON line stays
its last), holding:

- ``loader_wait_frac``: the fraction of the training epochs (after the first, if any)
  spent blocked waiting for the next batch; ``first_epoch_s``;
- ``checkpoint_saves``, ``checkpoint_save_s`` (total), ``checkpoint_mb`` (newest
  version), ``checkpoint_load_s``;
- ``direct_parts``: partitions this rank read from their files instead of over RPC;
  ``rss_mb``/``pss_mb`` at the end.

Faults (``TORCHELASTIC_RESTART_COUNT`` 0 only, i.e. torchrun's first incarnation):
``--kill-at E:B`` SIGKILLs rank ``--kill-rank`` after it trained batch ``B`` of epoch ``E``
(1-based); ``--kill-in-save STEP`` SIGKILLs it in the save of that step, once its own
files are written and before the version is published. ``--seed-log DIR`` appends every
trained batch's seed ids to ``DIR/seeds_rank<r>.jsonl`` (``inc``, ``epoch``, ``step``,
``t``, ``seeds``). The training loader is the one that shuffles; steps count its batches
from the first epoch (the examples' checkpoint step).
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, TextIO, Tuple

import pyg_dist
from pyg_dist import checkpoint, loop
from pyg_dist.checkpoint import _files as checkpoint_files
from pyg_dist.loader._base import DistLoader
from pyg_dist.rpc import _runtime as runtime
from pyg_dist.sampler import _direct as direct
from pyg_dist.memory import process_memory

PREFIX = "instrument: "


@dataclass
class Faults:
    """What to break, and where (see the module)."""
    kill_at: Optional[Tuple[int, int]] = None
    kill_in_save: Optional[int] = None
    kill_rank: int = 1
    seed_log: Optional[Path] = None


@dataclass
class Figures:
    """What was measured on this rank."""
    epochs: List[Tuple[float, float]] = field(default_factory=list)  # (seconds, wait)
    saves: int = 0
    save_s: float = 0.0
    checkpoint_mb: Optional[float] = None
    load_s: Optional[float] = None
    direct_parts: List[int] = field(default_factory=list)
    memory: Dict[str, Any] = field(default_factory=dict)

    def report(self) -> Dict[str, Any]:
        steady = self.epochs[1:] or self.epochs
        seconds = sum(s for s, _ in steady)
        return {"rank": rank(), "first_epoch_s": round(self.epochs[0][0], 4) if self.epochs
                else None,
                "loader_wait_frac": round(sum(w for _, w in steady) / seconds, 4)
                if seconds > 0 else None,
                "checkpoint_saves": self.saves, "checkpoint_save_s": round(self.save_s, 4),
                "checkpoint_mb": self.checkpoint_mb, "checkpoint_load_s": self.load_s,
                "direct_parts": self.direct_parts, **self.memory}


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def incarnation() -> int:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def die(faults: Faults, where: str) -> None:
    """SIGKILLs this process if it is the rank to kill, in the first incarnation."""
    if incarnation() == 0 and rank() == faults.kill_rank:
        print(f"[rank {rank()}] test hook: SIGKILL {where}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def seed_ids(batch: Any) -> List[int]:
    """Original ids of a node batch's seeds, or a link batch's seed positions."""
    stores = [s for s in batch.node_stores if "batch_size" in s and "n_id" in s]
    if stores:
        return stores[0].n_id[:stores[0].batch_size].tolist()
    return batch.input_id.tolist()


def trained(faults: Faults, epoch: int, batch_in_epoch: int, step: int, batch: Any) -> None:
    """After the example trained on ``batch``: log its seeds, kill when asked."""
    if faults.seed_log is not None:
        with open(faults.seed_log / f"seeds_rank{rank()}.jsonl", "a") as f:
            f.write(json.dumps({"inc": incarnation(), "epoch": epoch, "step": step,
                                "t": time.time(), "seeds": seed_ids(batch)}) + "\n")
    if faults.kill_at == (epoch, batch_in_epoch):
        die(faults, f"at epoch {epoch} batch {batch_in_epoch} (step {step})")


def watch_training(loader: DistLoader, inner: Iterator[Any], faults: Faults,
                   figures: Figures) -> Iterator[Any]:
    """``inner`` (one epoch of the training loader), timed; each batch counts as trained
    when the example asks for the next one."""
    state = loader.state_dict()
    epoch0, start, per_epoch = state["epoch"], state["batch"], len(loader)
    began = last = time.perf_counter()
    wait = 0.0
    for i, batch in enumerate(inner):
        wait += time.perf_counter() - last
        yield batch
        done = start + i + 1
        trained(faults, epoch0 + 1, done, epoch0 * per_epoch + done, batch)
        last = time.perf_counter()
    wait += time.perf_counter() - last
    figures.epochs.append((time.perf_counter() - began, wait))


def patch_loaders(faults: Faults, figures: Figures) -> None:
    original = DistLoader.__iter__

    def iterate(self: DistLoader) -> Iterator[Any]:
        inner = original(self)
        return watch_training(self, inner, faults, figures) if self.plan.shuffle else inner
    DistLoader.__iter__ = iterate  # type: ignore[method-assign]


def patch_checkpoints(faults: Faults, figures: Figures) -> None:
    save, load, write = checkpoint.save, checkpoint.load, checkpoint_files.write_rank_state

    def timed_save(path: Any, step: int, *args: Any, **kwargs: Any) -> str:
        if faults.kill_in_save == step:
            def write_then_die(*a: Any, **k: Any) -> Any:
                out = write(*a, **k)
                die(faults, f"while saving the checkpoint of step {step}")
                return out
            checkpoint_files.write_rank_state = write_then_die  # type: ignore[assignment]
        began = time.perf_counter()
        try:
            name = save(path, step, *args, **kwargs)
        finally:
            checkpoint_files.write_rank_state = write  # type: ignore[assignment]
        figures.saves, figures.save_s = figures.saves + 1, figures.save_s + \
            time.perf_counter() - began
        sizes = [f.stat().st_size for f in (Path(path) / name).rglob("*") if f.is_file()]
        figures.checkpoint_mb = round(sum(sizes) / 1e6, 3)
        return name

    def timed_load(path: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        info = load(path, *args, **kwargs)
        if info is not None:
            figures.load_s = round(time.perf_counter() - began, 4)
        return info
    checkpoint.save, checkpoint.load = timed_save, timed_load  # type: ignore[assignment]


def patch_shutdown(figures: Figures) -> None:
    """Records the direct partitions and the memory when the job leaves RPC, through
    ``pyg_dist.shutdown_rpc`` or :func:`pyg_dist.loop.finish`."""
    shutdown = pyg_dist.shutdown_rpc

    def recorded(*args: Any, **kwargs: Any) -> Any:
        if runtime.is_initialized():
            figures.direct_parts = direct.of(runtime.current()).parts
        figures.memory = {k: v for k, v in process_memory().items() if k != "anon_mb"}
        return shutdown(*args, **kwargs)
    pyg_dist.shutdown_rpc = recorded  # type: ignore[assignment]
    loop.shutdown_rpc = recorded  # type: ignore[attr-defined]


def parse(argv: List[str]) -> Tuple[Faults, List[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kill-at", default=None, help="EPOCH:BATCH (1-based)")
    p.add_argument("--kill-in-save", type=int, default=None, help="checkpoint step")
    p.add_argument("--kill-rank", type=int, default=1)
    p.add_argument("--seed-log", type=Path, default=None)
    p.add_argument("example", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS...")
    args = p.parse_args(argv)
    example = args.example[1:] if args.example[:1] == ["--"] else args.example
    if not example:
        p.error("give the example and its arguments after --")
    kill_at = None
    if args.kill_at is not None:
        try:
            epoch, batch = (int(v) for v in args.kill_at.split(":"))
        except ValueError:
            p.error(f"--kill-at must be EPOCH:BATCH, got {args.kill_at!r}")
        kill_at = (epoch, batch)
    return Faults(kill_at, args.kill_in_save, args.kill_rank, args.seed_log), example


def main(argv: Optional[List[str]] = None) -> None:
    faults, example = parse(sys.argv[1:] if argv is None else argv)
    figures = Figures()
    patch_loaders(faults, figures)
    patch_checkpoints(faults, figures)
    patch_shutdown(figures)
    sys.argv = list(example)
    sys.path[0] = os.path.dirname(os.path.abspath(example[0]))  # as ``python SCRIPT`` does
    runpy.run_path(example[0], run_name="__main__")
    emit(figures.report())


def emit(report: Dict[str, Any], out: Optional[TextIO] = None) -> None:
    """Writes ``report`` as one ``instrument:`` line in ONE ``write()``: every rank writes
    into the same pipe, and ``print()`` writes the text and its newline separately, so
    another rank's line could land between them (it did: the result line of a two-rank
    job ended up glued to the end of rank 1's report)."""
    out = sys.stdout if out is None else out
    out.write(PREFIX + json.dumps(report) + "\n")
    out.flush()


def read_reports(output: str) -> Dict[int, Dict[str, Any]]:
    """Rank -> the figures this wrapper printed in ``output`` (a job's combined output)."""
    reports = {}
    for line in output.splitlines():
        if line.startswith(PREFIX):
            report = json.loads(line[len(PREFIX):])
            reports[report["rank"]] = report
    return reports


if __name__ == "__main__":
    main()
