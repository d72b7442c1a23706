"""The checkpoint invariant, walked phase by phase: every rank is SIGKILLed at every named
phase of a save (and of a load), the job is restarted as ``torchrun --max-restarts=1``
would, and the restart must load the newest version published at the kill, resume
exactly (the same seeds per step and the same final weights and embedding rows as an
uninterrupted run) and leave no garbage after its next save.

The job (``checkpoint_job.py``) trains 6 steps on Cora, saving every 2 with ``keep=1``;
the kill comes in the save of step 4 (so the save also prunes step 2) or in the first
load of a job that starts from a step-4 checkpoint. ``checkpoint_kill.py`` patches the
phase's library function from outside and makes the walk deterministic (see there).
Ranks are forked as torchrun runs them (:func:`tests.support.scripts.run_script`).

2 ranks: every save phase x every rank, every load phase x every rank (26 jobs), here.
3 ranks: ``test_checkpoint_kills_three.py`` (a file of its own, so that
``pytest -n 2 --dist loadfile`` runs the two walks side by side).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from pyg_dist import Partitioner
from tests.support.scripts import ScriptRun, run_script
from pyg_dist.testing import encode_ids
from checkpoint_kill import LOAD_PHASES, SAVE_PHASES

HERE = Path(__file__).resolve().parent
JOB, KILL = HERE / "checkpoint_job.py", HERE / "checkpoint_kill.py"
STEPS, KILL_STEP = 6, 4
pytestmark = pytest.mark.multiprocess

#: phases after which LATEST has switched to the version being saved, by the victim:
#: rank 0's own kill stops it before the switch up to ``info``; another rank's kill
#: stops rank 0 at its next collective, which comes after the switch from ``digests`` on
SWITCHED_RANK0 = {"latest", "pruning", "pruned", "agreed"}
SWITCHED_OTHER = SWITCHED_RANK0 | {"digests", "info"}


@pytest.fixture(scope="module")
def parts(cora, tmp_path_factory) -> Callable[[int], Path]:
    """Cora with id-encoded attributes, split in ``world`` partitions (made once each)."""
    made: Dict[int, Path] = {}

    def get(world: int) -> Path:
        if world not in made:
            made[world] = tmp_path_factory.mktemp(f"cora_kills{world}")
            Partitioner(encode_ids(cora), world, made[world], seed=0,
                        progress=False).generate()
        return made[world]
    return get


def job_args(parts: Path, work: Path, steps: int = STEPS) -> List[str]:
    return [str(JOB), "--parts", str(parts), "--ckpt", str(work / "ckpt"), "--out",
            str(work), "--steps", str(steps)]


def run(world: int, args: List[str], max_restarts: int, script: Path = KILL) -> ScriptRun:
    job = run_script(script, args, world, timeout=240, max_restarts=max_restarts)
    assert job.returncode == 0, job.describe()
    return job


def results(work: Path, incarnation: int, world: int) -> List[dict]:
    return [json.loads((work / f"inc{incarnation}_rank{r}.json").read_text())
            for r in range(world)]


@pytest.fixture(scope="module")
def reference(parts, tmp_path_factory) -> Callable[[int], Tuple[List[dict], Path]]:
    """``world`` ranks' uninterrupted run, and a step-4 checkpoint to start loads from."""
    made: Dict[int, Tuple[List[dict], Path]] = {}

    def get(world: int) -> Tuple[List[dict], Path]:
        if world not in made:
            work = tmp_path_factory.mktemp(f"reference{world}")
            run(world, job_args(parts(world), work)[1:], 0, script=JOB)
            start = tmp_path_factory.mktemp(f"start{world}")
            run(world, job_args(parts(world), start, steps=KILL_STEP)[1:], 0, script=JOB)
            made[world] = results(work, 0, world), start / "ckpt"
        return made[world]
    return get


def check_resumed(work: Path, world: int, ref: List[dict], loaded: int,
                  job: ScriptRun) -> None:
    """The restart loaded step ``loaded``, trained exactly as the uninterrupted run from
    there, and its last save left only LATEST and the step-6 version."""
    for rank, got in enumerate(results(work, 1, world)):
        assert got["loaded"] == loaded, f"rank {rank}: {got['loaded']}\n{job.describe()}"
        assert sorted(map(int, got["steps"])) == list(range(loaded + 1, STEPS + 1))
        for step, seeds in got["steps"].items():
            assert seeds == ref[rank]["steps"][step], f"rank {rank} step {step}"
        assert got["weights"] == ref[rank]["weights"], f"rank {rank}: weights differ"
        assert got["rows"] == ref[rank]["rows"], f"rank {rank}: embedding rows differ"
    ckpt = work / "ckpt"
    latest = (ckpt / "LATEST").read_text().strip()
    assert latest.startswith(f"step{STEPS:09d}-")
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(["LATEST", latest]), \
        f"garbage left in {ckpt}: {sorted(p.name for p in ckpt.iterdir())}"


def walk_save(parts, reference, tmp_path, world: int, phase: str, rank: int) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ref = reference(world)[0]
    job = run(world, ["--phase", phase, "--rank", str(rank), "--step", str(KILL_STEP),
                      "--out", str(work), "--", *job_args(parts(world), work)], 1)
    assert f"checkpoint_kill: SIGKILL at {phase}" in job.output, job.describe()
    switched = phase in (SWITCHED_RANK0 if rank == 0 else SWITCHED_OTHER)
    check_resumed(work, world, ref, KILL_STEP if switched else 2, job)


def walk_load(parts, reference, tmp_path, world: int, phase: str, rank: int) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ref, start = reference(world)
    shutil.copytree(start, work / "ckpt")
    job = run(world, ["--phase", phase, "--rank", str(rank), "--out", str(work), "--",
                      *job_args(parts(world), work)], 1)
    assert f"checkpoint_kill: SIGKILL at {phase}" in job.output, job.describe()
    check_resumed(work, world, ref, KILL_STEP, job)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("phase", list(SAVE_PHASES))
def test_kill_in_save_two_ranks(parts, reference, tmp_path, phase, rank):
    walk_save(parts, reference, tmp_path, 2, phase, rank)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("phase", list(LOAD_PHASES))
def test_kill_in_load_two_ranks(parts, reference, tmp_path, phase, rank):
    walk_load(parts, reference, tmp_path, 2, phase, rank)
