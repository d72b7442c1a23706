"""A script written for torch_geometric.distributed runs after an import change, and gives
the same batches as the same job written in pyg_dist's own style."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      init_process_group, node_split, shutdown_rpc)
from pyg_dist.testing import free_port, run_ranks

pytestmark = pytest.mark.multiprocess  # every test here starts processes

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EPOCHS, BATCH, FANOUT, WORKERS = 2, 16, [5, 3], 1


@pytest.fixture(scope="module")
def pyg_layout(planetoid_root, tmp_path_factory) -> Path:
    """Cora partitioned by our CLI into PyG's example layout (``Cora-partitions`` plus the
    label and per-rank train index files its scripts load)."""
    root = tmp_path_factory.mktemp("pyg_layout")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "partition_graph.py"), "--dataset", "Cora",
         "--root", str(planetoid_root), "--num-parts", "2", "--out",
         str(root / "Cora-partitions"), "--pyg-extras", "--seed", "0"],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def _batches(loader) -> List[dict]:
    return [{"n_id": b.n_id.tolist(), "batch_size": b.batch_size,
             "y": b.y[:b.batch_size].tolist(), "x": float(b.x.sum()), "e_id": b.e_id.tolist()}
            for b in loader]


def _our_style(parts: str) -> List[dict]:
    ctx = DistContext.from_env(rpc_timeout=30)
    init_process_group("gloo", ctx)
    data = (LocalFeatureStore.from_partition(parts, ctx.rank),
            LocalGraphStore.from_partition(parts, ctx.rank))
    loader = DistNeighborLoader(data, FANOUT, input_nodes=node_split(data, "train", ctx),
                                batch_size=BATCH, shuffle=True, drop_last=True,
                                num_workers=WORKERS, concurrency=2, current_ctx=ctx)
    records = [r for _ in range(EPOCHS) for r in _batches(loader)]
    loader.close()
    shutdown_rpc()
    return records


@pytest.mark.timeout(240)
def test_a_pyg_style_script_runs_and_matches_our_style(pyg_layout, tmp_path):
    ports = [str(free_port()) for _ in range(2)]
    procs = []
    for rank in range(2):
        cmd = [sys.executable, str(HERE / "pyg_style_train.py"), "--dataset_root_dir",
               str(pyg_layout), "--node_rank", str(rank), "--num_nodes", "2",
               "--num_epochs", str(EPOCHS), "--batch_size", str(BATCH),
               "--num_neighbors", ",".join(map(str, FANOUT)), "--num_workers", str(WORKERS),
               "--master_addr", "127.0.0.1", "--ddp_port", ports[0],
               "--train_loader_port", ports[1], "--record", str(tmp_path / f"r{rank}.json")]
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        procs.append(subprocess.Popen(cmd, cwd=tmp_path, env={**env, "OMP_NUM_THREADS": "1"},
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("the PyG-style script did not finish in time")
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-6000:]
    assert "Partition metadata" in outputs[0] and "Closing" in outputs[1]
    theirs = [json.loads((tmp_path / f"r{rank}.json").read_text()) for rank in range(2)]
    ours = run_ranks(_our_style, 2, str(pyg_layout / "Cora-partitions"), timeout=150)
    for rank in range(2):
        assert len(theirs[rank]) == len(ours[rank]) > 0
        assert theirs[rank] == ours[rank], f"rank {rank}: the batches differ"
