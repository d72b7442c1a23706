"""A killed rank costs only the restart: ``torchrun --max-restarts=1``, 2 ranks on Cora,
``examples/node_classification.py`` with ``--checkpoint-dir``; rank 1 SIGKILLs itself in
the middle of epoch 3 of 5 in the first incarnation (``PYG_DIST_TEST_KILL_AT``).

The job must exit 0, resume exactly from its last checkpoint, and train on the same seeds
as a fault-free run with the same seed, batch for batch: every rank logs each trained
batch's seeds (``PYG_DIST_TEST_SEED_LOG``); the batches the first incarnation trained after
its last checkpoint are redone by the second (the model they updated was lost), so the
seeds trained on are the first incarnation's up to the checkpoint's step plus all of the
second's. Each seed is trained on exactly once per epoch, and the final test accuracy is
within 0.01 of the fault-free run's.
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pyg_dist import Partitioner
from pyg_dist.testing import free_port
from test_training import EXAMPLE, Job, assert_no_leftovers, start, wait

# 70 training seeds per rank, 5 batches per epoch; a checkpoint every 4 batches (steps 4,
# 8, 12, ...); the kill comes after epoch 3's third batch (step 13), one past step 12.
ARGS = ["--epochs", "5", "--batch-size", "16", "--num-neighbors", "5,5", "--seed", "3",
        "--checkpoint-every", "4", "--log-every", "0", "--rpc-timeout", "20",
        "--normalize-features"]
KILL_AT = "3:3"


@pytest.fixture(scope="module")
def cora2_resume(cora, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cora2_resume")
    Partitioner(cora, 2, root, seed=0, progress=False, overwrite=True).generate()
    return root


def run_restartable(parts: Path, out: Path, num_workers: int, kill_at: Optional[str],
                    timeout: float) -> Job:
    """The example under torchrun with one restart allowed; seeds logged into ``out``."""
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
           "--max-restarts=1", "--rdzv-backend=static", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(EXAMPLE), "--partition-dir", str(parts),
           "--checkpoint-dir", str(out / "ckpt"), "--num-workers", str(num_workers), *ARGS]
    env = {"PYG_DIST_TEST_SEED_LOG": str(out)}
    if kill_at:
        env["PYG_DIST_TEST_KILL_AT"] = kill_at
    marker = uuid.uuid4().hex
    job = wait(start(cmd, marker, env), cmd, timeout, time.monotonic())
    assert_no_leftovers(marker, job)
    assert job.returncode == 0, job.describe()
    return job


def trained_seeds(out: Path, resumed_from: Optional[int]) -> Dict[int, Dict[int, List[int]]]:
    """rank -> epoch -> the seeds trained on, in order (batches redone after a restart
    counted once: the first incarnation's only up to the step resumed from)."""
    seen: Dict[int, Dict[int, List[int]]] = {}
    for rank in (0, 1):
        epochs: Dict[int, List[int]] = defaultdict(list)
        for line in (out / f"seeds_rank{rank}.jsonl").read_text().splitlines():
            entry = json.loads(line)
            if resumed_from is None or entry["inc"] == 1 or entry["step"] <= resumed_from:
                epochs[entry["epoch"]].extend(entry["seeds"])
        seen[rank] = dict(epochs)
    return seen


def max_step(out: Path, rank: int, inc: int) -> int:
    lines = (out / f"seeds_rank{rank}.jsonl").read_text().splitlines()
    return max(json.loads(x)["step"] for x in lines if json.loads(x)["inc"] == inc)


@pytest.mark.timeout(330)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_killed_rank_resumes_exactly_from_its_checkpoint(cora2_resume, tmp_path, num_workers):
    clean = run_restartable(cora2_resume, tmp_path / "clean", num_workers, None, 150)
    faulty = run_restartable(cora2_resume, tmp_path / "faulty", num_workers, KILL_AT, 150)
    assert "test hook: SIGKILL at epoch 3 batch 3 (step 13)" in faulty.output, faulty.describe()
    assert "resumed exactly at epoch 3 batch 2 step 12" in faulty.output, faulty.describe()
    assert clean.result()["resumed_from"] is None and "checkpoint: resumed" not in clean.output
    assert faulty.result()["resumed_from"] == 12
    assert max_step(tmp_path / "faulty", 1, inc=0) == 13  # one batch was redone
    assert max_step(tmp_path / "faulty", 0, inc=1) == 25  # and training went on to the end

    want = trained_seeds(tmp_path / "clean", None)
    got = trained_seeds(tmp_path / "faulty", 12)
    assert sorted(want[0]) == list(range(1, 6))
    assert got == want  # same seeds, same batches, same order, every epoch and rank
    for epoch in range(1, 6):
        seeds = got[0][epoch] + got[1][epoch]
        assert len(seeds) == len(set(seeds)) == 140  # Cora's training nodes, once each
    assert abs(faulty.result()["test_acc"] - clean.result()["test_acc"]) <= 0.01
