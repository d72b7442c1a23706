"""``run_script``: a script on forked ranks ends, fails, restarts and times out as under
``torchrun``, and never passes wrongly."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.support.scripts import run_script

pytestmark = pytest.mark.multiprocess  # every test here starts processes

SCRIPT = '''
import os, sys, time
import torch.distributed as dist

rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo")
t = __import__("torch").tensor([rank + 1])
dist.all_reduce(t)
print(f"rank {rank} of {os.environ['WORLD_SIZE']} attempt {attempt} sum {int(t)} "
      f"argv {sys.argv[1:]} cwd {os.getcwd()} marker {os.environ.get('MARKER')}")
mode = sys.argv[1]
if rank == 1 and mode == "raise":
    raise ValueError("rank 1 broke")
if rank == 1 and mode == "flaky" and attempt == 0:
    sys.exit(3)
if rank == 1 and mode == "message":
    sys.exit("a message")
if rank == 0 and mode in ("raise", "sleep"):
    time.sleep(600)  # stopped by the launcher
if __name__ == "__main__":
    print(f"rank {rank} ran as __main__")
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


@pytest.mark.timeout(90)
def test_ranks_run_the_script_as_main_with_torchrun_variables(script, tmp_path):
    run = run_script(script, ["ok"], nproc=2, timeout=60, cwd=tmp_path,
                     extra_env={"MARKER": "m1"})
    assert run.returncode == 0, run.describe()
    for rank in (0, 1):
        assert (f"rank {rank} of 2 attempt 0 sum 3 argv ['ok'] cwd {tmp_path} marker m1"
                in run.output), run.describe()
        assert f"rank {rank} ran as __main__" in run.output
    assert all(not Path(f"/proc/{pid}").exists() or
               Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z" for pid in run.pids)


@pytest.mark.timeout(90)
def test_a_failed_rank_stops_the_others_and_fails_the_run(script, tmp_path):
    run = run_script(script, ["raise"], nproc=2, timeout=60)
    assert run.returncode == 1 and not run.timed_out, run.describe()
    assert "ValueError: rank 1 broke" in run.output
    assert "rank 1 (local_rank: 1) failed with exit code 1" in run.output
    assert run.seconds < 40, run.describe()  # rank 0's sleep was cut short
    message = run_script(script, ["message"], nproc=2, timeout=60)
    assert message.returncode == 1 and "a message" in message.output, message.describe()


@pytest.mark.timeout(120)
def test_a_restart_runs_every_rank_again_with_the_next_count(script):
    run = run_script(script, ["flaky"], nproc=2, timeout=90, max_restarts=1)
    assert run.returncode == 0, run.describe()
    assert "rank 1 (local_rank: 1) failed with exit code 3" in run.output
    assert "restarting every rank (restart 1 of 1)" in run.output
    assert "rank 0 of 2 attempt 1 sum 3" in run.output and len(run.pids) == 4
    no_restart = run_script(script, ["flaky"], nproc=2, timeout=60)
    assert no_restart.returncode == 1, no_restart.describe()


@pytest.mark.timeout(60)
def test_a_rank_past_the_timeout_is_killed(script):
    run = run_script(script, ["sleep"], nproc=2, timeout=6)
    assert run.timed_out and run.returncode == -9, run.describe()
    assert "timed out: killing every rank" in run.output
    for pid in run.pids:
        assert not os.path.exists(f"/proc/{pid}") or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
