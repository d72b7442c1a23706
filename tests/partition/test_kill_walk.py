"""The partition CLI and ``export`` SIGKILLed at each of their phases.

Every writer of a durable folder keeps one invariant: ``--out`` is at every moment the
previous complete folder or the new complete one (absent when there was none), and a
rerun succeeds and leaves nothing hidden behind. The kill comes from outside the
library: ``tests/support/kill_at_phase.py`` patches the function ending a phase to
SIGKILL the process there, then runs the real entry point (the CLI module, or a small
export script) on ranks forked as ``torchrun`` would start them
(:func:`tests.support.scripts.run_script`).

Walked: the CLI in memory (``--dataset synthetic``) and out of core (``--input DIR
--memory-budget``) at every phase over a previous output, and over no output at the
first phase (``--out`` prepared) and at those that complete and move the folder
(``finish`` on; between them the writer only fills its hidden folder, as over a previous
output: ``PYG_DIST_FULL_WALK=1`` walks those over no output too);
the CLI on 2 ranks (every phase either rank reaches, each rank killed); ``export`` on 2
ranks.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from pyg_dist.chunked import write_chunked
from pyg_dist.datasets import community_graph
from tests.support.scripts import run_script

pytestmark = pytest.mark.multiprocess  # every test here starts processes

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "tests" / "support" / "kill_at_phase.py"
EXPORT_SCRIPT = REPO / "tests" / "support" / "export_rows.py"
ENV = {"OMP_NUM_THREADS": "1", "PYG_DIST_RPC_TIMEOUT": "20"}
SYNTHETIC = ["--dataset", "synthetic", "--num-nodes", "240", "--avg-degree", "4",
             "--feat-dim", "3", "--num-classes", "3"]
ONE_PROCESS = ["assign", "relabel", "order_edges", "uid", "part_0", "part_1", "finish",
               "synced", "renamed", "done"]
# phases each rank of a 2-rank partitioning reaches (rank 0 completes the folder)
RANKS = {0: ["assign", "relabel", "order_edges", "copy_rows", "uid", "part_0", "finish",
             "synced", "renamed", "done"],
         1: ["assign", "relabel", "order_edges", "copy_rows", "uid", "part_1", "finish",
             "done"]}
EXPORT = {0: ["pairs", "synced", "manifest", "renamed", "done"], 1: ["pairs", "done"]}
# over no output: the first phase and those from the folder's completion on (every phase
# with PYG_DIST_FULL_WALK=1)
FRESH = None if os.environ.get("PYG_DIST_FULL_WALK") == "1" else ["assign", *ONE_PROCESS[6:]]


def tree(folder: Path) -> Optional[Dict[str, str]]:
    """Every file under ``folder`` by relative path -> digest (None: no folder)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def hidden(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def run(target: Sequence[str], nproc: int, phase: Optional[str] = None, rank: int = 0,
        out: Optional[Path] = None) -> Tuple[int, str]:
    """``target`` (``-m module args`` or ``script args``) on ``nproc`` ranks, through
    the wrapper that kills rank ``rank`` at ``phase`` when one is given."""
    if phase is None:
        module = target[0] == "-m"
        script, args = (target[1], target[2:]) if module else (target[0], target[1:])
    else:
        script, module, args = str(WRAPPER), False, [phase, str(rank), str(out), *target]
    # the first call starts the fork server (imports: minutes on a loaded machine)
    result = run_script(script, list(args), nproc, module=module, timeout=300, cwd=REPO,
                        extra_env=ENV)
    if result.timed_out:
        pytest.fail(result.describe())
    return result.returncode, result.output


def walk(target: Sequence[str], previous: Sequence[str], nproc: int,
         phases: Dict[int, List[str]], out: Path, fresh: bool = True) -> None:
    """Kills each rank at each of its phases over ``previous``'s complete output (and
    over no output when ``fresh``, at the phases in :data:`FRESH` when it is set), and
    checks the invariant and that a rerun succeeds."""
    reference = out.with_name("reference")
    code, text = run(with_out(target, reference), nproc)
    assert code == 0, text[-6000:]
    new = tree(reference)
    code, text = run(with_out(previous, reference.with_name("previous")), nproc)
    assert code == 0, text[-6000:]
    start = {"replace": tree(reference.with_name("previous"))}
    assert start["replace"] != new
    if fresh:
        start["fresh"] = None
    for how, before in start.items():
        for rank, names in phases.items():
            for phase in names:
                if how == "fresh" and FRESH is not None and phase not in FRESH:
                    continue
                restore(out, reference.with_name("previous") if before else None)
                code, text = run(target, nproc, phase, rank, out)
                where = f"{how}, rank {rank} killed at {phase}"
                assert f"SIGKILL at {phase}" in text and code != 0, f"{where}\n{text[-6000:]}"
                assert tree(out) in (before, new), f"{where}: {out} is neither the " \
                    f"previous nor the new complete folder: {tree(out)}\n{text[-3000:]}"
                code, text = run(target, nproc)
                assert code == 0, f"{where}: the rerun failed\n{text[-6000:]}"
                assert tree(out) == new, where
                assert not hidden(out.parent), (where, hidden(out.parent))


def with_out(target: Sequence[str], folder: Path) -> List[str]:
    """``target`` writing ``folder`` instead (its ``--out`` or last argument)."""
    args = list(target)
    if "--out" in args:
        args[args.index("--out") + 1] = str(folder)
    else:
        args[-2] = str(folder)
    return args


def restore(out: Path, previous: Optional[Path]) -> None:
    """``out`` as the walk starts each kill: absent, or a copy of ``previous``."""
    import shutil

    if out.exists():
        shutil.rmtree(out)
    if previous is not None:
        shutil.copytree(previous, out)


def cli(source: List[str], out: Path, seed: int, extra: Sequence[str] = ()) -> List[str]:
    return ["-m", "pyg_dist.cli.partition", *source, "--num-parts", "2", "--out", str(out),
            "--method", "random", "--seed", str(seed), "--overwrite", "--quiet", *extra]


@pytest.fixture(scope="module")
def chunks(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("walk") / "chunks"
    write_chunked(community_graph(240, 4.0, 3, 3, seed=0), folder, chunk_size=61)
    return folder


@pytest.mark.timeout(600)
def test_partition_cli_in_memory_killed_at_each_phase(tmp_path: Path) -> None:
    out = tmp_path / "out"
    walk(cli(SYNTHETIC, out, 2), cli(SYNTHETIC, out, 1), 1, {0: ONE_PROCESS}, out)


@pytest.mark.timeout(600)
def test_partition_cli_out_of_core_killed_at_each_phase(tmp_path: Path, chunks: Path) -> None:
    out = tmp_path / "out"
    source = ["--input", str(chunks), "--memory-budget", "1MB"]
    walk(cli(source, out, 2), cli(source, out, 1), 1,
         {0: ONE_PROCESS[:3] + ["copy_rows"] + ONE_PROCESS[3:]}, out)


@pytest.mark.timeout(1200)  # 38 runs of 2 ranks (forked: no wall-clock bound, not serial)
def test_partition_cli_two_ranks_killed_at_each_phase(tmp_path: Path, chunks: Path) -> None:
    out = tmp_path / "out"
    source = ["--input", str(chunks), "--memory-budget", "4MB"]
    walk(cli(source, out, 2), cli(source, out, 1), 2, RANKS, out, fresh=False)


@pytest.mark.timeout(900)  # 16 runs of 2 ranks
def test_export_two_ranks_killed_at_each_phase(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    code, text = run(cli(SYNTHETIC, parts, 0), 1)
    assert code == 0, text[-6000:]
    out = tmp_path / "out"
    target = [str(EXPORT_SCRIPT), str(parts), str(out), "2"]
    walk(target, [str(EXPORT_SCRIPT), str(parts), str(out), "1"], 2, EXPORT, out, fresh=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["node_types"]["_N"]) == 2
