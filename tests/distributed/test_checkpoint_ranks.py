"""``pyg_dist.checkpoint`` with real processes: 2 ranks save (DDP model, Adam, a
``DistEmbedding`` with ``SparseAdam``, the training loader's position); 2 ranks load it
exactly, 1 rank loads it rescaled (loaders start at the next epoch); an error on one rank
raises on every rank, naming it; a byte changed in place in a file that another rank
verifies is named on every rank."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.distributed as dist

from pyg_dist import (DistEmbedding, DistNeighborLoader, Partitioner, SparseAdam, node_split,
                      shutdown_rpc)
from pyg_dist import checkpoint
from pyg_dist.checkpoint._files import version_files
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids
from test_loader import _open


def _objects(ctx, data, seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(6, 3)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if ctx.world_size > 1 else model
    opt = torch.optim.Adam(ddp.parameters(), lr=0.05)
    loader = DistNeighborLoader(data=data, num_neighbors=[3], batch_size=20, shuffle=True,
                                input_nodes=node_split(data, "train", ctx), current_ctx=ctx)
    emb = DistEmbedding(100, 6, name="emb")
    return ddp, opt, loader, emb, SparseAdam([emb], lr=0.1)


def _save_job(root: str, path: str) -> Dict:
    ctx, data = _open(root)
    ddp, opt, loader, emb, sparse = _objects(ctx, data, 0)
    for i, batch in enumerate(loader):
        opt.zero_grad()
        sparse.zero_grad()
        ids = batch.n_id[:batch.batch_size] % 100
        (ddp(emb(ids)).pow(2).sum()).backward()
        opt.step()
        sparse.step()
        if i == 2:
            break
    checkpoint.save(path, step=3, state={"model": ddp, "optimizer.0": opt,
                                         f"embeddings.{emb.name}": emb,
                                         "sparse_optimizers.0": sparse, "loaders.0": loader,
                                         "extra": {"epoch": 0}})
    try:
        checkpoint.save(path, step=4, state={"model": ddp,
                                             "extra": {"bad": object()} if ctx.rank else {}})
        error = ""
    except (TypeError, RuntimeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    out = {"weight": [p.detach().tolist() for p in ddp.parameters()],
           "rows": emb.weight[torch.arange(100)].tolist(), "state": loader.state_dict(),
           "error": error}
    loader.close()
    shutdown_rpc()
    return out


def _load_job(root: str, path: str) -> Dict:
    ctx, data = _open(root)
    ddp, opt, loader, emb, sparse = _objects(ctx, data, 1)
    info = checkpoint.load(path, state={"model": ddp, "optimizer.0": opt,
                                        f"embeddings.{emb.name}": emb,
                                        "sparse_optimizers.0": sparse, "loaders.0": loader})
    first = next(iter(loader)).input_id.tolist()
    out = {"weight": [p.detach().tolist() for p in ddp.parameters()],
           "rows": emb.weight[torch.arange(100)].tolist(), "exact": info.exact,
           "positions": info.positions, "step": info.step, "extra": info.extra,
           "first": first, "order": loader.plan.batches(1)[0].tolist(),
           "steps": len(opt.state_dict()["state"]), "path": info.path}
    loader.close()
    shutdown_rpc()
    # DDP first: a reducer that outlives the process group destroys it holding the GIL,
    # which can deadlock with gloo's threads (the test then hangs at exit)
    del ddp, opt
    if dist.is_initialized():
        dist.destroy_process_group()
    return out


def _damaged_load_job(root: str, path: str) -> str:
    """Loads a checkpoint with a damaged file; returns the error this rank saw."""
    ctx, data = _open(root)
    ddp, opt, loader, emb, sparse = _objects(ctx, data, 1)
    try:
        checkpoint.load(path, state={"model": ddp, "optimizer.0": opt,
                                     f"embeddings.{emb.name}": emb,
                                     "sparse_optimizers.0": sparse, "loaders.0": loader})
        error = ""
    except (checkpoint.CheckpointError, RuntimeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    loader.close()
    shutdown_rpc()
    # DDP first: a reducer that outlives the process group destroys it holding the GIL,
    # which can deadlock with gloo's threads (the test then hangs at exit)
    del ddp, opt
    if dist.is_initialized():
        dist.destroy_process_group()
    return error


@pytest.fixture(scope="module")
def cora_one_part(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora_ckpt_ranks")
    Partitioner(encode_ids(cora), 1, root, seed=0, progress=False).generate()
    return root


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_save_on_two_ranks_load_on_two_and_on_one(cora_one_part, tmp_path):
    root, path = str(cora_one_part), str(tmp_path / "ckpt")
    saved = run_ranks(_save_job, 2, root, path, timeout=120)
    assert "rank 1" in saved[0]["error"] and "extra" in saved[0]["error"]
    assert saved[1]["error"].startswith("TypeError") and "extra" in saved[1]["error"]
    assert saved[0]["weight"] == saved[1]["weight"]

    two = run_ranks(_load_job, 2, root, path, timeout=120)
    for rank in range(2):
        o = two[rank]
        assert o["exact"] and o["positions"] == [(0, 3)] and o["step"] == 3
        assert o["extra"] == {"epoch": 0} and o["steps"] == 2
        assert o["weight"] == saved[0]["weight"] and o["rows"] == saved[0]["rows"]

    one = run_ranks(_load_job, 1, root, path, timeout=120)[0]
    assert not one["exact"] and one["positions"] == [(1, 0)]  # the next epoch, whole
    assert one["first"] == one["order"]                       # ... from its first batch
    assert one["weight"] == saved[0]["weight"] and one["rows"] == saved[0]["rows"]

    version = Path(two[0]["path"])  # rank r verifies the files r, r + 2, ... (sorted)
    flipped = version / sorted(version_files(version))[1]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    errors = run_ranks(_damaged_load_job, 2, root, path, timeout=120)
    assert all(str(flipped) in e for e in errors), errors
    assert errors[1].startswith("CheckpointError") and "rank 1" in errors[0]
