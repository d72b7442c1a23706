"""A killed rank costs only the restart: ``torchrun --max-restarts=1``, 2 ranks on Cora,
``benchmarks/trainers/node_classification.py`` with ``--checkpoint-dir``; rank 1 SIGKILLs itself in
the middle of epoch 3 of 5 in the first incarnation (``--kill-at`` of
:mod:`tests.support.instrument`, which runs the unmodified example).

The job must exit 0, resume exactly from its last checkpoint, and train on the same seeds
as a fault-free run with the same seed, batch for batch: every rank logs each trained
batch's seeds (``--seed-log``); the batches the first incarnation trained after
its last checkpoint are redone by the second (the model they updated was lost), so the
seeds trained on are the first incarnation's up to the checkpoint's step plus all of the
second's. Each seed is trained on exactly once per epoch, and the final test accuracy is
within 0.01 of the fault-free run's.

The jobs fork their ranks from a warm fork server, as torchrun runs them (restart
included: :func:`tests.support.scripts.run_script`). What the real ``torchrun`` does on a
lost rank (its restart, a second incarnation forming RPC again and sampling exactly) is
tested in test_elastic.py; what is tested here is the example's resume, which reads only
the variables torchrun sets, as the forked ranks get them.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest
import torch

from pyg_dist import DistEmbedding, Partitioner, shutdown_rpc
from pyg_dist.embedding import load_checkpoint
from tests.support import instrument
from test_training import EMBEDDING_EXAMPLE, EXAMPLE, Job, run_job

INSTRUMENT = Path(instrument.__file__)
pytestmark = pytest.mark.multiprocess  # every test here starts processes

# 70 training seeds per rank, 5 batches per epoch; a checkpoint every 4 batches (steps 4,
# 8, 12, ...); the kill comes after epoch 3's third batch (step 13), one past step 12.
ARGS = ["--epochs", "5", "--batch-size", "16", "--num-neighbors", "5,5", "--seed", "3",
        "--checkpoint-every", "4", "--log-every", "0", "--rpc-timeout", "20"]
KILL_AT = "3:3"


@pytest.fixture(scope="module")
def cora2_resume(cora, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cora2_resume")
    Partitioner(cora, 2, root, seed=0, progress=False, overwrite=True).generate()
    return root


def run_restartable(parts: Path, out: Path, num_workers: int, fault: Sequence[str],
                    timeout: float = 150, script: Path = EXAMPLE,
                    extra: Sequence[str] = ("--normalize-features",)) -> Job:
    """The example with one restart allowed, through the instrument wrapper: seeds
    logged into ``out``; ``fault``: the wrapper's fault options. Ranks are forked as
    torchrun would run them (``run_job``)."""
    out.mkdir()
    args = ["--seed-log", str(out), *fault, "--", str(script), "--partition-dir", str(parts),
            "--checkpoint-dir", str(out / "ckpt"), "--num-workers", str(num_workers), *ARGS,
            *extra]
    job = run_job(args, 2, timeout, script=INSTRUMENT, max_restarts=1)
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


@pytest.fixture(scope="module")
def clean(cora2_resume, tmp_path_factory):
    """The fault-free run (in-process sampling): the reference of every faulty run (batches
    are seeded per (seed, epoch, batch, rank), so sampler workers sample the same)."""
    out = tmp_path_factory.mktemp("resume_clean") / "run"
    job = run_restartable(cora2_resume, out, 0, [])
    assert job.result()["resumed_from"] is None and "checkpoint: resumed" not in job.output
    seeds = trained_seeds(out, None)
    assert sorted(seeds[0]) == list(range(1, 6))
    for epoch in range(1, 6):
        both = seeds[0][epoch] + seeds[1][epoch]
        assert len(both) == len(set(both)) == 140  # Cora's training nodes, once each
    return job, seeds


# Test metrics agree within 1 point (10 of Cora's 1000 test nodes); the epsilon keeps a
# difference of exactly 0.01 (0.735 - 0.725 = 0.010000000000000009 in floats) inside it.
CLOSE = 0.01 + 1e-9


def check_resumed(faulty: Job, out: Path, clean, resumed_from: int) -> None:
    assert faulty.result()["resumed_from"] == resumed_from, faulty.describe()
    assert max_step(out, 0, inc=1) == 25  # training went on to the end
    assert trained_seeds(out, resumed_from) == clean[1]  # same batches, order, epochs, ranks
    assert abs(faulty.result()["test_acc"] - clean[0].result()["test_acc"]) <= CLOSE


@pytest.mark.timeout(200)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_killed_rank_resumes_exactly_from_its_checkpoint(clean, cora2_resume, tmp_path,
                                                         num_workers):
    out = tmp_path / "faulty"
    faulty = run_restartable(cora2_resume, out, num_workers, ["--kill-at", KILL_AT])
    assert "test hook: SIGKILL at epoch 3 batch 3 (step 13)" in faulty.output, faulty.describe()
    assert "resumed exactly at epoch 3 batch 2 step 12" in faulty.output, faulty.describe()
    assert max_step(out, 1, inc=0) == 13  # one batch was trained, lost and redone
    check_resumed(faulty, out, clean, 12)


@pytest.mark.timeout(200)
def test_kill_while_saving_resumes_from_the_previous_checkpoint(clean, cora2_resume, tmp_path):
    out = tmp_path / "faulty"
    faulty = run_restartable(cora2_resume, out, 0, ["--kill-in-save", "12"])
    assert "test hook: SIGKILL while saving the checkpoint of step 12" in faulty.output, \
        faulty.describe()
    assert "resumed exactly at epoch 2 batch 3 step 8" in faulty.output, faulty.describe()
    check_resumed(faulty, out, clean, 8)
    versions = [p.name for p in (out / "ckpt").iterdir() if p.is_dir()]
    assert len(versions) == 2 and all(p.startswith("step0000000") for p in versions)


@pytest.mark.timeout(300)
def test_embedding_example_resumes_rows_and_sparse_adam(cora2_resume, tmp_path):
    """DistEmbedding rows and SparseAdam state come back: the restarted job trains on the
    same seeds and ends with the same rows (up to float summation order of the sparse
    updates of two ranks) and test accuracy as the fault-free run."""
    args = ["--num-neighbors", "5,5", "--eval-neighbors", "5,5", "--embedding-dim", "16",
            "--hidden", "16"]
    runs = {}
    for name, fault in (("clean", []), ("faulty", ["--kill-at", KILL_AT])):
        out = tmp_path / name
        runs[name] = run_restartable(cora2_resume, out, 0, fault, script=EMBEDDING_EXAMPLE,
                                     extra=[*args, "--checkpoint", str(out / "final")])
    faulty = runs["faulty"]
    assert "resumed exactly at epoch 3 batch 2 step 12" in faulty.output, faulty.describe()
    assert faulty.result()["resumed_from"] == 12
    assert trained_seeds(tmp_path / "faulty", 12) == trained_seeds(tmp_path / "clean", None)
    rows = {name: final_rows(tmp_path / name / "final") for name in runs}
    assert torch.allclose(rows["clean"], rows["faulty"], atol=1e-4), \
        (rows["clean"] - rows["faulty"]).abs().max()
    assert abs(faulty.result()["test_acc"] - runs["clean"].result()["test_acc"]) <= CLOSE


def final_rows(path: Path) -> torch.Tensor:
    """The ``node_embedding`` rows the example saved at its end, loaded in this process."""
    emb = DistEmbedding(2708, 16, name="node_embedding")
    load_checkpoint(path, embeddings=[emb])
    rows = emb.weight[torch.arange(2708)].clone()
    shutdown_rpc()
    return rows


@pytest.mark.timeout(300)
def test_link_prediction_example_resumes_exactly(cora2_resume, tmp_path):
    """The link loader's position (and its negatives, drawn per batch) resume exactly: the
    restarted job trains on the same seed edges, batch for batch, as the fault-free run
    and reaches the same test AUC."""
    link = EXAMPLE.parent / "link_prediction.py"
    extra = ["--batch-size", "512", "--epochs", "3"]  # ARGS' values are overridden
    runs = {}
    for name, fault in (("clean", []), ("faulty", ["--kill-at", "2:3"])):
        runs[name] = run_restartable(cora2_resume, tmp_path / name, 0, fault, script=link,
                                     extra=extra)
    faulty = runs["faulty"]
    resumed = faulty.result()["resumed_from"]
    assert "test hook: SIGKILL at epoch 2 batch 3" in faulty.output, faulty.describe()
    assert resumed is not None and resumed % 4 == 0 and "resumed exactly" in faulty.output
    want = trained_seeds(tmp_path / "clean", None)
    assert sorted(want[0]) == [1, 2, 3] and len(want[0][2]) > 3 * 512
    assert trained_seeds(tmp_path / "faulty", resumed) == want
    assert abs(faulty.result()["test_auc"] - runs["clean"].result()["test_auc"]) <= CLOSE
