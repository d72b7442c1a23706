"""Leaving a loader's loop early and exiting, batches still in flight: a clean exit every
time (exit code 0, the result printed, no error from a callback on torch's RPC thread
and no abort), over RPC and direct reads, with and without sampler workers.

The script (``tests/support/leave_early.py``) runs as ``torchrun`` runs it, on ranks
forked from a warm fork server (:func:`tests.support.scripts.run_script`); every
epoch of it breaks after two batches with two more in flight, and every RPC reply
reaches the sampler late, so requests are still in flight when the process exits.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pyg_dist import Partitioner
from tests.support.scripts import run_script

pytestmark = pytest.mark.multiprocess  # every test here starts processes

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "leave_early.py"
EPOCHS = 4
BAD = ("Event loop is closed", "INTERNAL ASSERT", "Traceback", "Task was destroyed",
       "Got the following error when running the callback")


@pytest.fixture(scope="module")
def parts(cora, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("early") / "parts"
    Partitioner(cora, 2, root, seed=0, progress=False).generate()
    return root


@pytest.mark.serial  # 2 ranks (and their sampler workers) per case
@pytest.mark.timeout(300)
@pytest.mark.parametrize("direct,workers,close", [
    ("0", 0, False), ("0", 0, True), ("1", 0, False), ("1", 0, True),
    ("0", 1, False), ("1", 1, False),  # a worker's fork server costs ~40 s of imports
], ids=["rpc-exit", "rpc-close", "direct-exit", "direct-close", "rpc-workers-exit",
        "direct-workers-exit"])
def test_leaving_early_with_batches_in_flight_exits_cleanly(parts, direct, workers, close):
    args = [str(parts), str(workers), str(EPOCHS), "0.2"] + (["close"] if close else [])
    run = run_script(SCRIPT, args, 2, timeout=240, cwd=REPO,
                     extra_env={"OMP_NUM_THREADS": "1", "PYG_DIST_DIRECT_READS": direct,
                                "PYG_DIST_RPC_TIMEOUT": "30"})
    assert not run.timed_out and run.returncode == 0, run.describe()
    lines = [line for line in run.output.splitlines() if line.startswith('{"rank"')]
    assert len(lines) == 2, run.describe()
    found = [bad for bad in BAD if bad in run.output]
    assert not found, f"{found}\n{run.describe()}"
