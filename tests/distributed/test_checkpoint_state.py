"""``checkpoint.save/load(path, step, state={...})`` with real processes and every kind of
entry at once: a DDP model, Adam, an LR scheduler, a ``DistEmbedding`` with ``SparseAdam``,
the training loader, a user object and a JSON value. Two ranks train 4 steps and save after
2; the checkpoint is resumed on 2 ranks (exactly) and on 3 ranks (the table reshards,
loaders start at the next epoch). Ground truth: every step's input is the same on every
rank, so DDP's and the sparse optimizer's means do not depend on the world size, and
resuming must end where never stopping ended."""
from __future__ import annotations

from typing import Any, Dict

import pytest
import torch
import torch.distributed as dist

from pyg_dist import (DistEmbedding, DistNeighborLoader, Partitioner, SparseAdam, node_split,
                      shutdown_rpc)
from pyg_dist import checkpoint
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids
from test_loader import _open

N, D = 60, 4


class Counter:
    """A user object with ``state_dict()``/``load_state_dict()``."""

    def __init__(self) -> None:
        self.count, self.losses = 0, torch.zeros(0)

    def state_dict(self) -> Dict[str, Any]:
        return {"count": self.count, "losses": self.losses.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.count, self.losses = state["count"], state["losses"]


def _state(ctx, data, seed: int) -> Dict[str, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(D, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if ctx.world_size > 1 else model
    opt = torch.optim.Adam(ddp.parameters(), lr=0.05)
    loader = DistNeighborLoader(data=data, num_neighbors=[3], batch_size=20, shuffle=True,
                                input_nodes=node_split(data, "train", ctx), current_ctx=ctx)
    emb = DistEmbedding(N, D, name="mixed_emb",  # after the loader, which joins RPC
                        init_func=lambda shape, dtype: torch.rand(shape, dtype=dtype))
    return {"model": ddp, "adam": opt, "sched": torch.optim.lr_scheduler.StepLR(opt, 1, 0.7),
            "table": emb, "sparse": SparseAdam([emb], lr=0.1), "train": loader,
            "counter": Counter(), "epoch": 0}


def _step(state: Dict[str, Any], batches: Any, i: int) -> None:
    """Training step ``i``: the same input on every rank; one loader batch consumed."""
    next(batches)
    gen = torch.Generator().manual_seed(100 + i)
    ids, target = torch.randint(0, N, (12,), generator=gen), torch.randn(12, 2, generator=gen)
    state["adam"].zero_grad()
    state["sparse"].zero_grad()
    loss = (state["model"](state["table"](ids)) - target).pow(2).mean()
    loss.backward()
    state["adam"].step()
    state["sparse"].step()
    state["sched"].step()
    state["counter"].count += 1
    state["counter"].losses = torch.cat([state["counter"].losses, loss.detach().view(1)])


def _snapshot(state: Dict[str, Any]) -> Dict[str, Any]:
    opt = state["sparse"].state["mixed_emb"]
    return {"params": [p.detach().clone() for p in state["model"].parameters()],
            "rows": state["table"].weight[torch.arange(N)].clone(),
            "m": opt["m"][torch.arange(N)].clone(), "lr": state["sched"].get_last_lr(),
            "count": state["counter"].count, "losses": state["counter"].losses.clone()}


def _finish(out: Dict[str, Any], state: Dict[str, Any]) -> Dict[str, Any]:
    state["train"].close()
    shutdown_rpc()
    # DDP first: a reducer that outlives the process group destroys it holding the GIL,
    # which can deadlock with gloo's threads (the test then hangs at exit)
    state.clear()
    if dist.is_initialized():
        dist.destroy_process_group()
    return out


def _reference_job(root: str, path: str) -> Dict[str, Any]:
    ctx, data = _open(root)
    state = _state(ctx, data, seed=0)
    batches = iter(state["train"])
    for i in range(2):
        _step(state, batches, i)
    state["epoch"] = 7
    checkpoint.save(path, 2, state)
    saved, position = _snapshot(state), state["train"].state_dict()
    for i in range(2, 4):
        _step(state, batches, i)
    try:  # a key that differs between ranks: the same error on every rank, naming it
        checkpoint.save(path, 9, {f"only_on_rank_{ctx.rank}": 1})
        error = ""
    except ValueError as exc:
        error = str(exc)
    return _finish({"saved": saved, "final": _snapshot(state), "error": error,
                    "position": (position["epoch"], position["batch"])}, state)


def _resume_job(root: str, path: str) -> Dict[str, Any]:
    ctx, data = _open(root)
    state = _state(ctx, data, seed=1)
    info = checkpoint.load(path, state)
    loaded = _snapshot(state)
    batches = iter(state["train"])
    for i in range(2, 4):
        _step(state, batches, i)
    return _finish({"loaded": loaded, "final": _snapshot(state), "exact": info.exact,
                    "positions": info.positions, "epoch": state["epoch"]}, state)


def _same(a: Dict[str, Any], b: Dict[str, Any], atol: float) -> None:
    for key in ("params", "rows", "m", "losses"):
        x, y = a[key], b[key]
        pairs = zip(x, y) if isinstance(x, list) else [(x, y)]
        assert all(torch.allclose(p, q, atol=atol, rtol=0) for p, q in pairs), key
    assert a["count"] == b["count"]
    assert a["lr"] == pytest.approx(b["lr"])


@pytest.fixture(scope="module")
def cora_one_part(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora_ckpt_state")
    Partitioner(encode_ids(cora), 1, root, seed=0, progress=False).generate()
    return root


@pytest.mark.multiprocess
@pytest.mark.timeout(800)
def test_mixed_state_resumes_on_two_and_on_three_ranks(cora_one_part, tmp_path):
    root, path = str(cora_one_part), str(tmp_path / "ckpt")
    ref = run_ranks(_reference_job, 2, root, path, timeout=240)
    for out in ref:
        assert "only_on_rank_0" in out["error"] and "only_on_rank_1" in out["error"], out
    _same(ref[0]["final"], ref[1]["final"], atol=0)
    assert ref[0]["position"] == (0, 2)

    two = run_ranks(_resume_job, 2, root, path, timeout=240)
    for out in two:
        assert out["exact"] and out["positions"] == [(0, 2)] and out["epoch"] == 7
        _same(out["loaded"], ref[0]["saved"], atol=0)
        _same(out["final"], ref[0]["final"], atol=1e-6)  # as if never stopped

    three = run_ranks(_resume_job, 3, root, path, timeout=240)
    for out in three:
        assert not out["exact"] and out["positions"] == [(1, 0)] and out["epoch"] == 7
        _same(out["loaded"], ref[0]["saved"], atol=0)  # the table resharded 2 -> 3
        _same(out["final"], ref[0]["final"], atol=1e-5)
