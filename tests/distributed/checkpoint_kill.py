"""Runs ``checkpoint_job.py`` with one rank SIGKILLed at one named phase of a checkpoint
save or load (a test wrapper: the phases are library functions, patched from here).

    checkpoint_kill.py --phase PHASE --rank R [--step S] -- checkpoint_job.py ARGS...

Only in torchrun's first incarnation (``TORCHELASTIC_RESTART_COUNT`` 0). A save phase
kills rank ``R`` in the save of step ``S`` right after the phase's function returns on
it. Phases that only rank 0 runs (``info``, ``latest``, ``pruning``, ``pruned``) kill
another rank ``R`` when rank 0 has done them: ``R`` waits at the entry of the final
agreement until rank 0 marks the phase done (``OUT/phase.done``), then dies without
entering it. ``pruning`` is rank 0 inside the removal of an old version: moved aside,
not yet deleted. A load phase kills rank ``R`` after the phase's function returns in the
first load.

So that the walk is deterministic, every other rank defers SIGTERM through the target
save (or load): the launcher's SIGTERM after the kill would otherwise race with how far
they get; they go on until a collective fails on the dead rank (or the save ends), as
they would with a launcher that is slow to notice, and a SIGTERM received meanwhile
ends them as soon as the save or load returns or raises. (Ignoring it instead left each
survivor to the launcher's SIGKILL after its 10 s grace: most of a save case's time.)
"""
from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pyg_dist.checkpoint as checkpoint
from pyg_dist.checkpoint import _reading as reading, _versions as versions, _writing as writing
from pyg_dist.format import _files as fs

#: phase -> (module, function whose return ends it, run by rank 0 only)
SAVE_PHASES: Dict[str, Tuple[Any, str, bool]] = {
    "created": (writing, "_begin", False),
    "dense": (writing, "save_dense", False),
    "rank_files": (writing, "_write_rank", False),
    "digests": (writing, "_digest_version", False),
    "info": (versions, "write_info", True),
    "latest": (versions, "switch_latest", True),
    "pruning": (fs, "remove", True),
    "pruned": (versions, "prune_versions", True),
    "agreed": (writing, "_agree_published", False),
}
LOAD_PHASES: Dict[str, Tuple[Any, str, bool]] = {
    "load_version": (reading, "_agreed_version", False),
    "load_dense": (reading, "_load_dense", False),
    "load_plan": (reading, "_plan", False),
    "load_restore": (reading, "_restore", False),
}
PHASES = {**SAVE_PHASES, **LOAD_PHASES}


class Walk:
    """Where this rank is: the save or load being walked, and whether it is the victim."""

    def __init__(self, phase: str, victim: int, step: int, out: Path) -> None:
        self.phase, self.victim, self.step, self.out = phase, victim, step, out
        self.rank = int(os.environ["RANK"])
        self.first = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0
        self.active = False  # inside the save or load walked
        self.terminated = False  # a SIGTERM came while it was deferred

    def enter(self) -> None:
        self.active = True
        if self.rank != self.victim:
            signal.signal(signal.SIGTERM, self._defer)
            signal.siginterrupt(signal.SIGTERM, False)  # blocked calls go on (SA_RESTART)

    def _defer(self, signum: int, frame: Any) -> None:
        self.terminated = True

    def leave(self) -> None:
        """The save or load walked returned or raised: a SIGTERM deferred ends us now,
        and a later one at once (as the launcher's would have, had it not waited)."""
        self.active = False
        if self.rank != self.victim:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if self.terminated:
                os.kill(os.getpid(), signal.SIGTERM)

    def die(self) -> None:
        print(f"[rank {self.rank}] checkpoint_kill: SIGKILL at {self.phase}", file=sys.stderr,
              flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def wrap(module: Any, name: str, after: Callable[[], None], walk: Walk) -> None:
    original = getattr(module, name)

    def patched(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if walk.active:
            after()
        return out
    setattr(module, name, patched)


def wrap_pruning(walk: Walk) -> None:
    """Rank 0 dies (or marks the phase done) inside the first removal of the save: the
    version is moved aside, not yet deleted."""
    original = fs.remove

    def patched(path: Path) -> None:
        if walk.active and walk.rank == 0:
            walk.active = False
            if walk.victim == 0:
                walk.die()
            (walk.out / "phase.done").touch()
        original(path)
    fs.remove = patched


def wrap_agreement(walk: Walk) -> None:
    """Another rank than 0 waits at the final agreement until rank 0 is past the phase,
    then dies without entering it."""
    original = writing._agree_published

    def patched(*args: Any, **kwargs: Any) -> None:
        if walk.active and walk.rank == walk.victim:
            deadline = time.monotonic() + 60
            while not (walk.out / "phase.done").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            walk.die()
        original(*args, **kwargs)
    writing._agree_published = patched


def install(walk: Walk) -> None:
    module, name, rank0_only = PHASES[walk.phase]
    if walk.phase in LOAD_PHASES:
        load = reading.load

        def load_walked(*args: Any, **kwargs: Any) -> Any:
            walk.enter()
            try:
                return load(*args, **kwargs)
            finally:
                walk.leave()
        checkpoint.load = load_walked
    else:
        save = writing.save

        def save_walked(path: Any, step: int, *args: Any, **kwargs: Any) -> str:
            if step != walk.step:
                return save(path, step, *args, **kwargs)
            walk.enter()
            try:
                return save(path, step, *args, **kwargs)
            finally:
                walk.leave()
        checkpoint.save = save_walked
    if walk.phase == "pruning":
        wrap_pruning(walk)
        if walk.victim != 0:
            wrap_agreement(walk)
    elif rank0_only and walk.victim != 0:
        if walk.rank == 0:
            wrap(module, name, lambda: (walk.out / "phase.done").touch(), walk)
        wrap_agreement(walk)
    elif walk.rank == walk.victim:
        wrap(module, name, walk.die, walk)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=sorted(PHASES), required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--step", type=int, default=4)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("job", nargs=argparse.REMAINDER)
    args = p.parse_args()
    job = args.job[1:] if args.job[:1] == ["--"] else args.job
    walk = Walk(args.phase, args.rank, args.step, args.out)
    if walk.first:
        install(walk)
    sys.argv = list(job)
    runpy.run_path(job[0], run_name="__main__")


if __name__ == "__main__":
    main()
