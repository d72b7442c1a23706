"""A script written for torch_geometric.distributed runs after an import change, and gives
the same batches as the same job written in pyg_dist's own style."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      init_process_group, node_split, shutdown_rpc)
from pyg_dist.testing import free_port, run_ranks
from tests.support.scripts import run_script

pytestmark = pytest.mark.multiprocess  # every test here starts processes

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EPOCHS, BATCH, FANOUT, WORKERS = 2, 16, [5, 3], 1


@pytest.fixture(scope="module")
def pyg_layout(planetoid_root, tmp_path_factory) -> Path:
    """Cora partitioned by our CLI into PyG's example layout (``Cora-partitions`` plus the
    label and per-rank train index files its scripts load)."""
    root = tmp_path_factory.mktemp("pyg_layout")
    done = run_script(REPO / "scripts" / "partition_graph.py",
                      ["--dataset", "Cora", "--root", str(planetoid_root), "--num-parts", "2",
                       "--out", str(root / "Cora-partitions"), "--pyg-extras", "--seed", "0"],
                      timeout=120, cwd=REPO, torchrun=False)
    assert done.returncode == 0, done.describe()
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
    """Both processes run the script as ``python pyg_style_train.py --node_rank r ...``
    (forked from a warm fork server: :func:`tests.support.scripts.run_script`)."""
    ports = [str(free_port()) for _ in range(2)]
    rank_args = [["--dataset_root_dir", str(pyg_layout), "--node_rank", str(rank),
                  "--num_nodes", "2", "--num_epochs", str(EPOCHS), "--batch_size", str(BATCH),
                  "--num_neighbors", ",".join(map(str, FANOUT)), "--num_workers", str(WORKERS),
                  "--master_addr", "127.0.0.1", "--ddp_port", ports[0],
                  "--train_loader_port", ports[1], "--record", str(tmp_path / f"r{rank}.json")]
                 for rank in range(2)]
    run = run_script(HERE / "pyg_style_train.py", nproc=2, rank_args=rank_args, timeout=180,
                     cwd=tmp_path, torchrun=False, extra_env={"OMP_NUM_THREADS": "1"})
    assert run.returncode == 0 and not run.timed_out, run.describe()
    assert "Partition metadata" in run.output and "Closing" in run.output, run.describe()
    theirs = [json.loads((tmp_path / f"r{rank}.json").read_text()) for rank in range(2)]
    ours = run_ranks(_our_style, 2, str(pyg_layout / "Cora-partitions"), timeout=150)
    for rank in range(2):
        assert len(theirs[rank]) == len(ours[rank]) > 0
        assert theirs[rank] == ours[rank], f"rank {rank}: the batches differ"
