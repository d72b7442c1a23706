"""End-to-end training jobs: the full-featured trainers (``benchmarks/trainers/``) as
``torchrun`` runs them; the short examples a user copies are run by tests/examples.

Jobs that only need to run to their end fork their ranks from a warm fork server
(:func:`tests.support.scripts.run_script`: torchrun's variables, sessions, failure and
restart policy, without ~10 s of imports per rank); the tests of what torchrun itself
does (two torchrun commands as two machines, its report of a killed or stalled rank) start
the real one, as a subprocess in its own session. Every job has a timeout; its exit code
is checked and its output shown on failure. Every process a job starts (torchrun, its
trainers, their sampler workers) inherits a unique marker in its environment, so the
tests can tell that nothing outlives the job.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest
import torch

from pyg_dist import Partitioner
from pyg_dist.inference import read_export
from pyg_dist.testing import free_port
from tests.support.scripts import run_script

pytestmark = pytest.mark.multiprocess  # every test here starts processes

REPO = Path(__file__).resolve().parents[2]
TRAINERS = REPO / "benchmarks" / "trainers"
EXAMPLE = TRAINERS / "node_classification.py"
EMBEDDING_EXAMPLE = TRAINERS / "embedding_node_classification.py"
MARKER_ENV = "PYG_DIST_TEST_JOB"
# Tuned so that 2 trainers (one full-batch step per epoch, DDP-averaged) and 1 trainer
# (batch 160 = both shares) train the same model; fixed seeds make the runs repeatable.
CORA_ARGS = ["--epochs", "40", "--lr", "0.01", "--hidden", "64", "--num-neighbors", "25,10",
             "--eval-neighbors=-1,-1", "--normalize-features", "--seed", "0"]


@dataclass
class Job:
    """A finished torchrun command."""
    cmd: List[str]
    returncode: int
    output: str
    seconds: float

    def describe(self) -> str:
        return (f"$ {' '.join(self.cmd)}\nexit code {self.returncode} after "
                f"{self.seconds:.1f}s; output:\n{self.output[-12000:]}")

    def result(self) -> Dict:
        """The JSON line the example printed last (fails the test if there is none)."""
        lines = [line for line in self.output.splitlines() if line.startswith("{")]
        assert lines, f"no JSON result line\n{self.describe()}"
        return json.loads(lines[-1])


def torchrun_cmd(script_args: Sequence[str], nproc: int, port: int, nnodes: int = 1,
                 node_rank: int = 0, script: Path = EXAMPLE) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
            f"--node-rank={node_rank}", f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1", f"--master-port={port}", "--max-restarts=0",
            str(script), *script_args]


def start(cmd: List[str], marker: str, extra_env: Optional[Dict[str, str]] = None
          ) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", MARKER_ENV: marker,
           **(extra_env or {})}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait(proc: subprocess.Popen, cmd: List[str], timeout: float, started: float) -> Job:
    """Waits for ``proc``; on timeout kills its whole session and fails with its output."""
    try:
        out, _ = proc.communicate(timeout=max(timeout - (time.monotonic() - started), 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout:.0f}s: $ {' '.join(cmd)}\n{out[-12000:]}")
    return Job(cmd, proc.returncode, out, time.monotonic() - started)


def run_job(script_args: Sequence[str], nproc: int, timeout: float,
            extra_env: Optional[Dict[str, str]] = None, script: Path = EXAMPLE,
            max_restarts: int = 0) -> Job:
    """``torchrun --nproc-per-node=nproc script script_args``, ranks forked (see above)."""
    marker = uuid.uuid4().hex
    env = {"OMP_NUM_THREADS": "1", MARKER_ENV: marker, **(extra_env or {})}
    run = run_script(script, script_args, nproc, timeout=timeout, cwd=REPO, extra_env=env,
                     max_restarts=max_restarts)
    job = Job(run.cmd, run.returncode, run.output, run.seconds)
    if run.timed_out:
        pytest.fail(f"timed out after {timeout:.0f}s\n{job.describe()}")
    assert_no_leftovers(marker, job)
    return job


class LiveJob:
    """A running torchrun command whose output is read as it comes, with timestamps."""

    def __init__(self, cmd: List[str], marker: str,
                 extra_env: Optional[Dict[str, str]] = None) -> None:
        self.cmd, self.marker = cmd, marker
        self.started = time.monotonic()
        self.proc = start(cmd, marker, extra_env)
        self.lines: List[Tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    @property
    def output(self) -> str:
        return "".join(line for _, line in list(self.lines))

    def wait_for(self, pattern: str, timeout: float) -> float:
        """The time the first output line matching ``pattern`` appeared."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if re.search(pattern, line):
                    return at
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        self.kill()
        pytest.fail(f"no line matching {pattern!r} within {timeout:.0f}s:\n"
                    f"{self.output[-12000:]}")

    def kill(self) -> None:
        """Kills torchrun's session and every process of the job (trainers may run in
        sessions of their own)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in processes_with(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone meanwhile
                pass

    def finish(self, timeout: float) -> Job:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
            self._reader.join(5)
            pytest.fail(f"timed out after {timeout:.0f}s: $ {' '.join(self.cmd)}\n"
                        f"{self.output[-12000:]}")
        self._reader.join(10)
        job = Job(self.cmd, self.proc.returncode, self.output,
                  time.monotonic() - self.started)
        assert_no_leftovers(self.marker, job)
        return job


def trainer_pid(marker: str, rank: int) -> int:
    """The pid of trainer ``rank`` of the job with ``marker`` (torchrun sets RANK): of
    the processes with that RANK (its sampler workers inherit it), the one whose parent
    is not one of them."""
    needle = f"RANK={rank}".encode()
    found = []
    for pid in processes_with(marker):
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                found.append((pid, ppid))
        except (OSError, ValueError, IndexError):
            continue
    pids = {pid for pid, _ in found}
    trainers = [pid for pid, ppid in found if ppid not in pids]
    if not trainers:
        raise AssertionError(f"no live trainer with RANK={rank}")
    return trainers[0]


def processes_with(marker: str) -> List[int]:
    """Pids of live processes whose environment holds ``MARKER_ENV=marker``."""
    needle = f"{MARKER_ENV}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":  # zombies are dead (their parent reaps them)
                    pids.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return pids


def assert_no_leftovers(marker: str, job: Job, grace: float = 15.0) -> None:
    """Every process of the job is gone within ``grace`` seconds of torchrun's exit."""
    deadline = time.monotonic() + grace
    while (pids := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in pids:  # clean up before failing
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not pids, f"processes {pids} outlived the job by {grace:.0f}s\n{job.describe()}"


@pytest.fixture(scope="module")
def cora_parts(cora, tmp_path_factory) -> Dict[int, Path]:
    """Cora partitioned into 1 and 2 parts (METIS, fixed seed)."""
    roots = {}
    for num_parts in (1, 2):
        roots[num_parts] = tmp_path_factory.mktemp(f"cora{num_parts}")
        Partitioner(cora, num_parts, roots[num_parts], seed=0, progress=False,
                    overwrite=True).generate()
    return roots


@pytest.mark.timeout(150)
def test_two_trainers_match_one_on_cora(cora_parts):
    two = run_job(["--partition-dir", str(cora_parts[2]), "--batch-size", "80", *CORA_ARGS],
                  nproc=2, timeout=70)
    assert two.returncode == 0, two.describe()
    one = run_job(["--partition-dir", str(cora_parts[1]), "--batch-size", "160", *CORA_ARGS],
                  nproc=1, timeout=60)
    assert one.returncode == 0, one.describe()
    r2, r1 = two.result(), one.result()
    assert (r2["world_size"], r2["num_parts"], r1["world_size"], r1["num_parts"]) == (2, 2, 1, 1)
    for key in ("test_acc", "val_acc", "epoch_s", "train_loss", "batches_per_epoch"):
        assert key in r2 and key in r1, key
    assert r2["test_acc"] >= 0.75, two.describe()
    assert abs(r2["test_acc"] - r1["test_acc"]) <= 0.03, (r2, r1)
    assert two.output.count("{") == 1, "only rank 0 prints the JSON line"


@pytest.mark.timeout(150)
def test_layerwise_eval_and_export_after_training(cora_parts, cora, tmp_path):
    """--layerwise-eval agrees with the full fan-out (exact) sampled evaluation, and
    --export holds one row per original node id of Cora, each the model's output."""
    out = tmp_path / "export"
    args = ["--partition-dir", str(cora_parts[2]), "--batch-size", "80", "--epochs", "15",
            "--lr", "0.01", "--hidden", "64", "--num-neighbors", "25,10",
            "--eval-neighbors=-1,-1", "--seed", "0", "--layerwise-eval", "--export", str(out)]
    job = run_job(args, nproc=2, timeout=110)
    assert job.returncode == 0, job.describe()
    result = job.result()
    assert result["test_acc"] >= 0.6, result
    assert abs(result["layerwise_test_acc"] - result["test_acc"]) <= 0.003, result
    ids, values = read_export(out)["_N"]
    assert sorted(ids.tolist()) == list(range(cora.num_nodes))
    assert values.shape == (cora.num_nodes, 7) and values.dtype.name == "float32"
    # rows sit at their original ids: the test accuracy read from the export, joined with
    # the unpartitioned graph's labels, is the one the job computed
    pred = torch.from_numpy(values[ids.argsort()]).argmax(1)
    mask = cora.test_mask
    exported_acc = float((pred[mask] == cora.y[mask]).float().mean())
    assert abs(exported_acc - result["layerwise_test_acc"]) <= 1e-6, (exported_acc, result)


@pytest.mark.timeout(120)
def test_two_machine_job_with_two_torchrun_commands(cora_parts):
    port, marker = free_port(), uuid.uuid4().hex
    args = ["--partition-dir", str(cora_parts[2]), "--epochs", "1", "--batch-size", "32",
            "--log-every", "1"]
    cmds = [torchrun_cmd(args, nproc=1, port=port, nnodes=2, node_rank=r) for r in (0, 1)]
    started = time.monotonic()
    procs = [start(cmd, marker) for cmd in cmds]
    jobs = [wait(proc, cmd, 90, started) for proc, cmd in zip(procs, cmds)]
    for job in jobs:
        assert job.returncode == 0, job.describe()
    result = jobs[0].result()
    assert result["world_size"] == 2 and result["num_parts"] == 2 and result["epochs"] == 1
    assert 0.0 <= result["test_acc"] <= 1.0
    assert not [l for l in jobs[1].output.splitlines() if l.startswith("{")], "rank 1 is silent"
    # progress within the epoch, as plain lines (not a terminal) with rates and the time
    # left, from rank 0 only
    progress = r"^epoch 1 train: 1/\d+ \(\d+%\) \| [\d.]+k? batches/s, [\d.]+k? seeds/s \| ETA \d+"
    assert re.search(progress, jobs[0].output, re.M), jobs[0].describe()
    assert re.search(r"^epoch 1 train: (\d+)/\1 done in [\d.]+s \| ", jobs[0].output, re.M)
    assert "epoch 1 train" not in jobs[1].output
    assert_no_leftovers(marker, jobs[0])


@pytest.mark.serial  # a wall-clock bound
@pytest.mark.timeout(150)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_killed_rank_fails_the_job_naming_it(cora_parts, num_workers):
    args = ["--partition-dir", str(cora_parts[2]), "--epochs", "1000", "--batch-size", "16",
            "--num-workers", str(num_workers), "--rpc-timeout", "20"]
    job = LiveJob(torchrun_cmd(args, nproc=2, port=free_port()), uuid.uuid4().hex)
    job.wait_for(r"epoch\s+1 \|", timeout=90)  # both ranks are training
    os.kill(trainer_pid(job.marker, 1), signal.SIGKILL)
    killed = time.monotonic()
    done = job.finish(timeout=90)
    assert done.returncode != 0, done.describe()
    # torchrun's failure report names the lost rank and how it died
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)", done.output), done.describe()
    assert "SIGKILL" in done.output, done.describe()
    after = time.monotonic() - killed
    assert after < 45, f"the job took {after:.0f}s after the kill to fail\n{done.describe()}"
    assert '{"test_acc"' not in done.output, "a failed job printed results"


STALL_TIMEOUT_S = 10


def _stall_and_wait(job: LiveJob, ready: str) -> Tuple[Job, float]:
    """SIGSTOPs rank 1 once ``ready`` appeared; returns the job and the seconds from the
    stop until torchrun saw another rank fail. (torchrun then SIGTERMs the stopped rank,
    which cannot act on it, and SIGKILLs it after its own fixed 30 s grace period: the
    test ends the job itself at that point.)"""
    job.wait_for(ready, timeout=90)
    os.kill(trainer_pid(job.marker, 1), signal.SIGSTOP)
    stopped = time.monotonic()
    failed_at = job.wait_for(r"Sending process \d+ closing signal SIGTERM",
                             timeout=STALL_TIMEOUT_S + 60)
    job.kill()
    return job.finish(timeout=30), failed_at - stopped


@pytest.mark.serial  # a wall-clock bound
@pytest.mark.timeout(200)
def test_a_stalled_rank_is_named_in_bounded_time_example(cora_parts):
    args = ["--partition-dir", str(cora_parts[2]), "--epochs", "1000", "--batch-size", "16",
            "--rpc-timeout", str(STALL_TIMEOUT_S)]
    job = LiveJob(torchrun_cmd(args, nproc=2, port=free_port()), uuid.uuid4().hex)
    done, after = _stall_and_wait(job, r"epoch\s+1 \|")
    assert re.search(r"rank 1 (has sent no heartbeat|failed)", done.output), done.describe()
    assert after < STALL_TIMEOUT_S + 30, f"{after:.0f}s after the stop\n{done.describe()}"


@pytest.mark.serial  # a wall-clock bound
@pytest.mark.timeout(200)
def test_a_stalled_rank_is_named_in_bounded_time_readme_loop(cora_parts, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(readme_training_loop(cora_parts[2], guarded=True, epochs=1000))
    job = LiveJob(torchrun_cmd([], nproc=2, port=free_port(), script=script),
                  uuid.uuid4().hex, {"PYG_DIST_RPC_TIMEOUT": str(STALL_TIMEOUT_S)})
    done, after = _stall_and_wait(job, r"rank 0 epoch 0 loss")
    assert re.search(r"rank 1 (has sent no heartbeat|failed)", done.output), done.describe()
    assert after < STALL_TIMEOUT_S + 30, f"{after:.0f}s after the stop\n{done.describe()}"


@pytest.mark.timeout(120)
def test_embedding_example_learns_cora_without_features(cora_parts, tmp_path):
    job = run_job(["--partition-dir", str(cora_parts[2]), "--epochs", "30",
                   "--checkpoint", str(tmp_path / "ckpt")],
                  nproc=2, timeout=90, script=EMBEDDING_EXAMPLE)
    assert job.returncode == 0, job.describe()
    result = job.result()
    assert (result["world_size"], result["num_parts"]) == (2, 2)
    # chance is 1/7 and the majority class 0.32; the embeddings must have learnt
    assert result["test_acc"] >= 0.5, job.describe()
    ckpt = tmp_path / "ckpt"  # one atomic checkpoint of the table and its optimizer
    version = (ckpt / "LATEST").read_text().strip()
    info = json.loads((ckpt / version / "info.json").read_text())  # written last: complete
    assert info["format"] == "pyg_dist.checkpoint"
    assert info["entries"] == {"embedding.node_embedding": ["stateful", "DistEmbedding"],
                               "optimizer.node_embedding": ["stateful", "SparseAdam"]}
    table = info["sharded"]["embedding.node_embedding"][0]
    assert table["shape"] == [2708, 64] and table["dtype"] == "float32"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("example", ["hetero_node_classification", "link_prediction"])
def test_other_examples_train_and_report(example, cora_parts, hetero_graph, tmp_path):
    """Both train past chance; the hetero example's --layerwise-eval agrees with its exact
    (full fan-out) sampled evaluation, and --export holds every paper's output by original
    id: joined with the unpartitioned graph's labels it gives the same accuracy."""
    extra: List[str] = []
    if example == "hetero_node_classification":
        parts, out = tmp_path / "hetero", tmp_path / "export"
        Partitioner(hetero_graph, 2, parts, seed=0, progress=False).generate()
        metric, floor = "test_acc", 0.5  # 4 classes, learnable from features and structure
        extra = ["--eval-neighbors=-1,-1", "--layerwise-eval", "--export", str(out)]
    else:
        parts, metric, floor = cora_parts[2], "test_auc", 0.6  # chance is 0.5
    job = run_job(["--partition-dir", str(parts), "--epochs", "3", *extra], nproc=2,
                  timeout=90, script=TRAINERS / f"{example}.py")
    assert job.returncode == 0, job.describe()
    result = job.result()
    assert (result["world_size"], result["num_parts"], result["epochs"]) == (2, 2, 3)
    assert result[metric] >= floor, job.describe()
    if example == "hetero_node_classification":
        assert abs(result["layerwise_test_acc"] - result["test_acc"]) <= 0.003, result
        ids, values = read_export(out)["paper"]
        paper = hetero_graph["paper"]
        assert sorted(ids.tolist()) == list(range(paper.num_nodes))
        pred = torch.from_numpy(values[ids.argsort()]).argmax(1)
        exported = float((pred[paper.test_mask] == paper.y[paper.test_mask]).float().mean())
        assert abs(exported - result["layerwise_test_acc"]) <= 5e-5, (exported, result)  # rounded


def readme_training_loop(partition_dir: Path, guarded: bool, epochs: int = 1) -> str:
    """The training loop of README.md, for ``epochs`` epochs on ``partition_dir``;
    without its ``if __name__ == "__main__":`` guard when ``guarded`` is False."""
    text = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(import torch\nfrom torch\.nn\.parallel.*?)```", text,
                     re.S).group(1)
    assert '"parts/cora"' in code and "range(10)" in code, "README loop changed: update this"
    code = code.replace('"parts/cora"', repr(str(partition_dir))).replace(
        "range(10)", f"range({epochs})")
    if not guarded:
        code = code.replace('if __name__ == "__main__":', "if True:")
    return code


@pytest.mark.timeout(120)
@pytest.mark.parametrize("guarded", [True, False])
def test_readme_training_loop(cora_parts, tmp_path, guarded):
    """The README's loop trains as written; without the main guard its spawned sampler
    workers re-run the script, which must fail fast with a hint, never hang."""
    script = tmp_path / "train.py"
    script.write_text(readme_training_loop(cora_parts[2], guarded))
    job = run_job([], nproc=2, timeout=90, script=script)
    if guarded:
        assert job.returncode == 0, job.describe()
        assert len(re.findall(r"rank \d epoch 0 loss \d", job.output)) == 2, job.describe()
    else:
        assert job.returncode != 0, job.describe()
        assert 'if __name__ == "__main__":' in job.output, job.describe()
        assert job.seconds < 60, job.describe()
