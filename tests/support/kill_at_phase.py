"""Runs a writer's real entry point and SIGKILLs this process at one named phase.

The tests' fault injection for the writers of durable folders (the partition CLI in
memory, out of core and under ``torchrun``, and ``export``): nothing in the library
knows about it. It patches the functions that end each phase so that, on the chosen
rank, the phase's end is followed by ``SIGKILL`` of the process (not an exception: no
``finally`` runs), then runs the entry point as ``__main__``::

    python tests/support/kill_at_phase.py PHASE RANK OUT -m pyg_dist.cli.partition ARGS
    python tests/support/kill_at_phase.py PHASE RANK OUT path/to/script.py ARGS

``RANK`` is compared with the ``RANK`` variable (0 outside ``torchrun``); ``OUT`` is the
output folder (the ``renamed`` phase watches renames of it). Phases (:data:`PHASES`):

- ``assign``, ``relabel``, ``order_edges``, ``copy_rows``, ``uid``: the partition
  pipeline's steps (:meth:`~pyg_dist.partition._pipeline.Team.reached`);
- ``part_<p>``: partition ``p``'s files are written;
- ``pairs``: the first of this rank's export file pairs is written; ``manifest``: the export's
  manifest is written;
- ``finish``: the partition writer is about to complete the folder (META, gathering
  the ranks' partitions); ``synced``: the complete temporary folder
  was flushed to disk;
- ``renamed``: the first rename that moves ``OUT`` (or another folder to ``OUT``) has
  happened; ``done``: the entry point's work returned (the output is complete).

The process prints ``kill_at_phase: armed PHASE`` before running the entry point, and
a phase that is never reached on this rank leaves the run alone (the test checks that
the kill happened where it expects one).
"""
from __future__ import annotations

import functools
import importlib
import os
import runpy
import signal
import sys
from pathlib import Path
from typing import Any, Callable, List

PIPELINE = ("assign", "relabel", "order_edges", "copy_rows", "uid")
PHASES = PIPELINE + ("part_0", "part_1", "part_2", "pairs", "manifest", "finish", "synced",
                     "renamed", "done")


def die(phase: str) -> None:
    print(f"kill_at_phase: SIGKILL at {phase}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def after(fn: Callable[..., Any], phase: str,
          when: Callable[..., bool] = lambda *a, **k: True) -> Callable[..., Any]:
    """``fn``, followed by the kill when ``when(*args, **kwargs)``."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if when(*args, **kwargs):
            die(phase)
        return result
    return wrapper


def before(fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        die(phase)
        return fn(*args, **kwargs)
    return wrapper


def arm_pipeline(phase: str) -> None:
    from pyg_dist.partition import _pipeline as pipeline
    from pyg_dist.partition._distributed import team

    if phase in PIPELINE:
        for cls in (pipeline.OneProcess, team.RankTeam):
            cls.reached = after(cls.reached, phase, lambda self, p: p == phase)
    elif phase.startswith("part_"):
        part = int(phase[len("part_"):])
        pipeline.write_part = after(pipeline.write_part, phase,
                                    lambda tmp, p, *a, **k: p == part)
    elif phase == "finish":
        for cls in (pipeline.OneProcess, team.RankTeam):
            cls.finish = before(cls.finish, phase)


def arm_export(phase: str) -> None:
    export = importlib.import_module("pyg_dist.inference._export")
    if phase == "pairs":
        export._write_pair = after(export._write_pair, phase)
    elif phase == "manifest":
        export._write_manifest = after(export._write_manifest, phase)


def arm_files(phase: str, out: Path) -> None:
    """``synced`` and ``renamed``: the atomic publication of
    :mod:`pyg_dist.format._files`, whichever way it renames."""
    from pyg_dist.format import _files as files, _renames as renames

    if phase == "synced":
        files.sync_tree = after(files.sync_tree, phase)
    elif phase == "renamed":
        def moves_out(src: Any, dst: Any, *args: Any, **kwargs: Any) -> bool:
            return out in (Path(src).absolute(), Path(dst).absolute())
        os.replace = after(os.replace, phase, moves_out)
        os.rename = after(os.rename, phase, moves_out)
        libc = getattr(renames, "_LIBC", None)
        if libc is not None:  # renameat2(RENAME_EXCHANGE), called through ctypes
            renames._LIBC = Exchange(libc, out)


class Exchange:
    """A stand-in for libc whose ``renameat2`` kills after an exchange with ``out``."""

    def __init__(self, libc: Any, out: Path) -> None:
        self.libc, self.out = libc, out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.libc, name)

    def renameat2(self, *args: Any) -> int:
        result = self.libc.renameat2(*args)
        if result == 0 and self.out in (Path(os.fsdecode(args[1])).absolute(),
                                         Path(os.fsdecode(args[3])).absolute()):
            die("renamed")
        return result


def main(argv: List[str]) -> None:
    phase, rank, out, *target = argv
    if phase not in PHASES:
        raise SystemExit(f"kill_at_phase: unknown phase {phase!r} (one of {PHASES})")
    module = target[0] == "-m"
    entry, args = (target[1], target[2:]) if module else (target[0], target[1:])
    if int(os.environ.get("RANK", "0")) == int(rank):
        arm_pipeline(phase)
        arm_export(phase)
        arm_files(phase, Path(out).absolute())
        print(f"kill_at_phase: armed {phase}", file=sys.stderr, flush=True)
    sys.argv = [entry, *args]
    try:
        if module:
            runpy.run_module(entry, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(entry, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0) or phase != "done":
            raise
    if phase == "done" and int(os.environ.get("RANK", "0")) == int(rank):
        die(phase)


if __name__ == "__main__":
    main(sys.argv[1:])
