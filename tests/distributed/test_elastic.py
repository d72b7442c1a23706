"""Jobs that survive a lost rank: ``torchrun --max-restarts=1`` restarts the workers and
the second incarnation forms pyg_dist's RPC groups again and samples correctly.

Each job runs ``elastic_job.py`` (2 ranks on Cora, full fan-out, so every batch has
one right answer): rank 1 of incarnation 0 SIGKILLs or SIGSTOPs itself after two
batches; incarnation 1 must sample every seed of both ranks, each batch equal to the
ground truth computed on the unpartitioned graph, and the job must exit 0.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import List, Optional

import pytest
import torch

from pyg_dist import Partitioner
from pyg_dist.testing import free_port
from pyg_dist.testing import encode_ids, khop_in_neighbourhood
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE
from test_training import Job, LiveJob, assert_no_leftovers, processes_with, start

# every test here spawns processes; real torchrun jobs of 5+ fresh interpreters, with
# wall-clock bounds: one at a time (scripts/test.sh runs them beside the other multiprocess
# tests, so a job's own deadline is about three times what it takes alone)
pytestmark = [pytest.mark.multiprocess, pytest.mark.serial]

JOB = Path(__file__).resolve().parent / "elastic_job.py"


@pytest.fixture(scope="module")
def cora_ids(cora, tmp_path_factory):
    """Cora with id-encoded attributes, partitioned in two (METIS, fixed seed)."""
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora_elastic")
    Partitioner(data, 2, root, seed=0, progress=False).generate()
    return data, root


def elastic_cmd(rdzv: str, port: int, args: List[str]) -> List[str]:
    """torchrun with one restart allowed, 2 ranks on 127.0.0.1."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
           "--max-restarts=1"]
    if rdzv == "c10d":
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
    else:  # static rendezvous, torchrun's default
        cmd += ["--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}"]
    return cmd + [str(JOB), *args]


def run_elastic(rdzv: str, root: Path, out: Path, timeout: float, fault: str,
                num_workers: int = 0, rpc_timeout: float = 20) -> Job:
    out.mkdir()
    cmd = elastic_cmd(rdzv, free_port(), ["--parts", str(root), "--out", str(out),
                                          "--fault", fault, "--num-workers", str(num_workers)])
    marker = uuid.uuid4().hex
    job = finish(cmd, start(cmd, marker, {"PYG_DIST_RPC_TIMEOUT": str(rpc_timeout)}), marker,
                 timeout)
    assert_no_leftovers(marker, job)
    return job


def finish(cmd: List[str], proc: subprocess.Popen, marker: str, timeout: float) -> Job:
    """Waits for ``proc``; on timeout kills every process of the job and fails."""
    started = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # kill every process of the job: trainers run in
        for pid in [proc.pid, *processes_with(marker)]:  # sessions of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone meanwhile
                pass
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout:.0f}s: $ {' '.join(cmd)}\n{out[-12000:]}")
    return Job(cmd, proc.returncode, out, time.monotonic() - started)


def check_samples(data, root: Path, out: Path, incarnation: Optional[int], job: Job) -> None:
    """Both ranks of ``incarnation`` (their restart count; ``None``: any) sampled all
    their seeds, each batch exactly."""
    for rank in range(2):
        paths = list(out.glob(f"inc{'*' if incarnation is None else incarnation}_rank{rank}.json"))
        assert len(paths) == 1, f"rank {rank} of incarnation {incarnation} wrote no result\n" \
                                f"{job.describe()}"
        path = paths[0]
        result = json.loads(path.read_text())
        seeds = torch.tensor(result["seeds"], dtype=torch.long)  # node_split: original ids
        assert len(seeds) > 16 * 3  # several batches
        sampled = [s for b in result["batches"] for s in b["seeds"]]
        assert sorted(set(sampled)) == sorted(seeds.tolist())
        for batch in result["batches"]:
            nodes, edges = khop_in_neighbourhood(
                {HOMO_NODE: data.num_nodes}, {HOMO_EDGE: data.edge_index},
                {HOMO_NODE: torch.tensor(batch["seeds"])}, 2, [HOMO_EDGE])
            assert batch["nid"] == sorted(nodes[HOMO_NODE])
            assert batch["oid"] == sorted(edges[HOMO_EDGE])


def check_restarted(out: Path, job: Job) -> None:
    """The job exited 0 after a second incarnation, which is the one that finished."""
    assert job.returncode == 0, job.describe()
    started = sorted(p.name for p in out.glob("*.started"))
    assert started == ["inc0_rank0.started", "inc0_rank1.started", "inc1_rank0.started",
                       "inc1_rank1.started"], f"{started}\n{job.describe()}"
    assert not list(out.glob("inc0_*.json")), "incarnation 0 finished despite the fault"


@pytest.mark.timeout(240)
def test_killed_rank_restarts_and_samples_correctly(cora_ids, tmp_path):
    """Static rendezvous (torchrun's default), sampling in the trainers; the c10d
    rendezvous restarts in the next test, with sampler workers (each job starts 5 or more
    fresh interpreters: the combinations are not all run)."""
    data, root = cora_ids
    job = run_elastic("static", root, tmp_path / "out", timeout=200, fault="kill")
    check_restarted(tmp_path / "out", job)
    check_samples(data, root, tmp_path / "out", 1, job)


@pytest.mark.timeout(240)
def test_killed_rank_restarts_with_sampler_workers(cora_ids, tmp_path):
    data, root = cora_ids
    job = run_elastic("c10d", root, tmp_path / "out", timeout=200, fault="kill",
                      num_workers=1)
    check_restarted(tmp_path / "out", job)
    check_samples(data, root, tmp_path / "out", 1, job)


@pytest.mark.timeout(260)
def test_stopped_rank_is_restarted_like_a_dead_one(cora_ids, tmp_path):
    """rank 0 names the silent rank 1 within the RPC timeout and fails; torchrun stops
    the round (SIGTERM, which the stopped rank cannot act on) and restarts once the stopped
    rank is gone. torchrun would SIGKILL it after its fixed 30 s grace (its
    ``--shutdown-timeout`` does not apply to a restart): the test does it as soon as
    torchrun has sent the SIGTERM, which changes nothing torchrun or pyg_dist does."""
    data, root = cora_ids
    out, marker = tmp_path / "out", uuid.uuid4().hex
    out.mkdir()
    cmd = elastic_cmd("c10d", free_port(), ["--parts", str(root), "--out", str(out),
                                            "--fault", "stop", "--num-workers", "0"])
    live = LiveJob(cmd, marker, {"PYG_DIST_RPC_TIMEOUT": "10"})
    live.wait_for(r"Sending process \d+ closing signal SIGTERM", timeout=170)
    stopped = [pid for pid in processes_with(marker) if _state(pid) == "T"]
    assert stopped, f"no stopped rank left when torchrun stopped the round\n{live.output}"
    for pid in stopped:
        os.kill(pid, signal.SIGKILL)
    job = live.finish(timeout=70)
    check_restarted(out, job)
    # rank 0 of incarnation 0 named the silent rank when its collective timed out
    first = job.output.split("rank 0 incarnation 1 batch 0")[0]
    assert re.search(r"pyg_dist: rank 1 has sent no heartbeat for \d+s", first), job.describe()
    check_samples(data, root, out, 1, job)


def _state(pid: int) -> str:
    """The state letter of process ``pid`` (``T``: stopped); empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@pytest.mark.timeout(240)
def test_two_machines_continue_after_one_loses_its_rank(cora_ids, tmp_path):
    """Two torchrun commands as two machines (c10d): the machine that lost rank 1
    counts a restart, the other is restarted for the new round without counting one
    (its workers see TORCHELASTIC_RESTART_COUNT=0 again); both form RPC together."""
    data, root = cora_ids
    out, port, marker = tmp_path / "out", free_port(), uuid.uuid4().hex
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--max-restarts=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
           "--rdzv-id=two-machines", str(JOB), "--parts", str(root), "--out", str(out),
           "--fault", "kill"]
    procs = [start(cmd, marker, {"PYG_DIST_RPC_TIMEOUT": "20"}) for _ in range(2)]
    deadline = time.monotonic() + 200
    jobs = [finish(cmd, proc, marker, max(deadline - time.monotonic(), 1)) for proc in procs]
    for job in jobs:
        assert job.returncode == 0, job.describe()
    assert_no_leftovers(marker, jobs[0])
    assert (out / "fault.done").exists() and len(list(out.glob("*.started"))) >= 3
    check_samples(data, root, out, None, jobs[0])


# the orphan test's timeout and watchdog floor: they give up after max(2 * 15, 30) = 30 s
# of silence, on a store silent for half of that (60 s and 30 s with the defaults). The
# timeout also bounds the sampler workers' joining (their fork servers start fresh
# interpreters side by side): 15 s leaves room for one starting later under load.
ORPHAN_ENV = {"PYG_DIST_RPC_TIMEOUT": "15", "PYG_DIST_WATCHDOG_MIN_ABORT": "30"}
ORPHAN_ABORT_S = 30


@pytest.mark.timeout(300)
def test_orphaned_trainers_exit_within_the_bound_naming_the_lost_agent(cora_ids, tmp_path):
    """torchrun's agent SIGKILLed mid-training (one sampler worker per rank): the
    orphaned trainers and their workers are gone within the watchdog's bound of it
    (twice the timeout, at least ``PYG_DIST_WATCHDOG_MIN_ABORT``: here 30 s, not the
    default 60 s, so they stop 15 s after the agent, not 30 s), and say the store and its
    agent were lost. Before, they took 190 s and blamed a worker that runs its code at
    import time."""
    _, root = cora_ids
    out, marker = tmp_path / "out", uuid.uuid4().hex
    out.mkdir()
    cmd = elastic_cmd("static", free_port(), ["--parts", str(root), "--out", str(out),
                                              "--fault", "agent", "--num-workers", "1",
                                              "--epochs", "100000", "--idle-after-fault",
                                              "0.5"])
    job = finish(cmd, start(cmd, marker, ORPHAN_ENV), marker, 260)
    took = time.time() - (out / "fault.done").stat().st_mtime  # the pipe closes last
    assert took <= ORPHAN_ABORT_S + 10, \
        f"orphans exited {took:.0f}s after the agent died\n{job.describe()}"
    assert re.search(r"rendezvous store at \S+ has not answered for \d+s", job.output), \
        job.describe()
    assert "torchrun agent hosting it (or its machine) was lost" in job.output, job.describe()
    assert "runs its code at import time" not in job.output, job.describe()
    assert_no_leftovers(marker, job)
