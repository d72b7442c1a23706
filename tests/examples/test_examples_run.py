"""Every example runs as README shows it: ``torchrun --nproc-per-node=2`` on Cora (the
heterogeneous one on a synthetic papers/authors/institutions graph), learns, and ends
with one JSON line of results; checkpoints resume and the export holds every node."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from pyg_dist import Partitioner
from pyg_dist.inference import read_export
from tests.support.scripts import ScriptRun, run_script

pytestmark = pytest.mark.multiprocess  # every test here starts ranks

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def run(example: str, args: List[str], timeout: float = 150) -> Dict:
    """``torchrun --nproc-per-node=2 examples/<example>.py args``: its JSON line."""
    job: ScriptRun = run_script(EXAMPLES / f"{example}.py", args, 2, timeout=timeout,
                                cwd=REPO, extra_env={"OMP_NUM_THREADS": "1"})
    assert job.returncode == 0, job.describe()
    lines = [line for line in job.output.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"one JSON line, from rank 0 only\n{job.describe()}"
    result = json.loads(lines[0])
    assert job.output.rstrip().endswith(lines[0]), "the JSON line comes last"
    result["_output"] = job.output
    return result


@pytest.fixture(scope="module")
def cora2(cora, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cora2")
    Partitioner(cora, 2, root, seed=0, progress=False, overwrite=True).generate()
    return root


@pytest.fixture(scope="module")
def trained(cora2, tmp_path_factory) -> Dict:
    """node_classification.py trained 20 epochs, saving a checkpoint every epoch."""
    ckpt = tmp_path_factory.mktemp("ckpt") / "node"
    result = run("node_classification", ["--partition-dir", str(cora2), "--epochs", "20",
                                         "--checkpoint-dir", str(ckpt)])
    result["_ckpt"] = ckpt
    return result


@pytest.mark.timeout(200)
def test_node_classification_learns_cora(trained):
    assert (trained["world_size"], trained["epochs"]) == (2, 20)
    assert trained["test_acc"] >= 0.7, trained["_output"]  # chance 1/7, majority 0.32
    assert len(re.findall(r"^epoch +\d+ \| loss", trained["_output"], re.M)) == 20


@pytest.mark.timeout(200)
def test_node_classification_resumes_from_its_checkpoint(trained, cora2, tmp_path):
    ckpt = tmp_path / "node"
    shutil.copytree(trained["_ckpt"], ckpt)
    result = run("node_classification", ["--partition-dir", str(cora2), "--epochs", "22",
                                         "--checkpoint-dir", str(ckpt)])
    out = result["_output"]
    assert re.search(r"checkpoint: resumed exactly at epoch \d+ batch \d+ step 20 ", out), out
    assert re.findall(r"^epoch +(\d+) \| loss", out, re.M) == ["21", "22"], out
    assert result["test_acc"] >= 0.7, out


@pytest.mark.timeout(200)
def test_inference_exports_every_node_of_the_trained_model(trained, cora2, cora, tmp_path):
    out = tmp_path / "emb"
    result = run("inference", ["--partition-dir", str(cora2), "--checkpoint-dir",
                               str(trained["_ckpt"]), "--out", str(out)])
    # exact layer-wise inference agrees with the example's full fan-out evaluation
    assert abs(result["test_acc"] - trained["test_acc"]) <= 0.003, (result, trained)
    ids, values = read_export(out)["_N"]
    assert sorted(ids.tolist()) == list(range(cora.num_nodes)) and values.shape[1] == 7
    pred = torch.from_numpy(values[ids.argsort()]).argmax(1)  # rows at their original ids
    acc = float((pred[cora.test_mask] == cora.y[cora.test_mask]).float().mean())
    assert abs(acc - result["test_acc"]) <= 5e-5, (acc, result)  # the JSON line is rounded


@pytest.mark.timeout(200)
def test_inference_without_a_checkpoint_says_so(cora2, tmp_path):
    job = run_script(EXAMPLES / "inference.py", ["--partition-dir", str(cora2),
                     "--checkpoint-dir", str(tmp_path / "none"), "--out", str(tmp_path / "o")],
                     2, timeout=120, cwd=REPO, extra_env={"OMP_NUM_THREADS": "1"})
    assert job.returncode != 0 and "error: no checkpoint in" in job.output, job.describe()
    assert "Traceback" not in job.output, job.describe()  # one line, not a crash


@pytest.mark.timeout(200)
def test_link_prediction_scores_held_out_edges(cora2):
    result = run("link_prediction", ["--partition-dir", str(cora2), "--epochs", "2"])
    assert result["world_size"] == 2
    assert result["test_auc"] >= 0.75, result["_output"]  # chance 0.5


@pytest.mark.timeout(200)
def test_hetero_example_classifies_papers(hetero_graph, tmp_path):
    parts = tmp_path / "hetero"
    Partitioner(hetero_graph, 2, parts, seed=0, progress=False).generate()
    result = run("hetero_node_classification", ["--partition-dir", str(parts), "--epochs", "3"])
    assert (result["world_size"], result["epochs"]) == (2, 3)
    assert result["test_acc"] >= 0.5, result["_output"]  # 4 classes


@pytest.mark.timeout(250)
def test_embedding_example_learns_without_features(cora2, tmp_path):
    ckpt = tmp_path / "ckpt"
    result = run("embedding_node_classification", ["--partition-dir", str(cora2), "--epochs",
                                                   "30", "--checkpoint-dir", str(ckpt)],
                 timeout=200)
    assert result["test_acc"] >= 0.45, result["_output"]  # majority class 0.32
    version = (ckpt / "LATEST").read_text().strip()
    info = json.loads((ckpt / version / "info.json").read_text())
    assert info["entries"]["embedding"] == ["stateful", "DistEmbedding"], info["entries"]
    assert info["entries"]["sparse"] == ["stateful", "SparseAdam"], info["entries"]
