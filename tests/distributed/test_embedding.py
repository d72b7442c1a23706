"""DistEmbedding + sparse optimizers on 2 and 3 real processes vs. one process.

The same global batches (six chunks per step) are split over the ranks (chunk ``c``
goes to rank ``c % world_size``); the tables and optimizer state must match a
one-process run. Every chunk uses rows 0 and N-1, so several ranks update the same
rows in the same step; in step 1 some ranks have nothing to send. The 2-rank run
saves checkpoints (tables and optimizer state together, and one table and its
optimizer by themselves) that are loaded on 3 ranks and on 1, sees a save that
fails on one rank fail on both and leave the previous checkpoint, and checks that
creation errors reach every rank. A rank that dies mid-save leaves the previous
checkpoint loadable on any number of ranks.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

from pyg_dist.embedding import (DistEmbedding, DistTensor, SparseAdagrad, SparseAdam,
                                load_checkpoint, save_checkpoint)
from pyg_dist.format import RangeBook
from pyg_dist import DistContext, init_rpc, shutdown_rpc
from pyg_dist.testing import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here starts processes

N, D, CHUNKS, STEPS = 23, 4, 6, 3
Tables = Dict[str, torch.Tensor]


def _batches() -> List[List[Tuple[torch.Tensor, torch.Tensor]]]:
    gen = torch.Generator().manual_seed(11)
    steps = []
    for step in range(STEPS):
        chunks = []
        for c in range(CHUNKS):
            if step == 1 and c in (1, 3, 4, 5):
                ids = torch.empty(0, dtype=torch.long)
            else:
                ids = torch.cat([torch.tensor([0, N - 1]),
                                 torch.randint(0, N, (9,), generator=gen)])
            chunks.append((ids, torch.randn(ids.numel(), D, generator=gen)))
        steps.append(chunks)
    return steps


def _init_table(name: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    return torch.randn(N, D, generator=gen)


def _build(prefix: str, book_a: Optional[RangeBook]) -> Tuple[List[DistEmbedding], List[Any]]:
    emb_a = DistEmbedding(N, D, name=f"{prefix}a", partition=book_a)
    emb_b = DistEmbedding(N, D, name=f"{prefix}b", partition=[0, N])  # ranks share 1 part
    emb_g = DistEmbedding(N, D, name=f"{prefix}g")  # not node-aligned: even split
    adam = SparseAdam([emb_a, emb_b], lr=0.05, betas=(0.8, 0.9), eps=1e-7)
    adagrad = SparseAdagrad(emb_g, lr=0.2)
    return [emb_a, emb_b, emb_g], [adam, adagrad]


def _tables(embs: List[DistEmbedding], opts: List[Any]) -> Tables:
    every = torch.arange(N)
    out = {e.name[-1]: e.weight[every] for e in embs}
    for opt in opts:
        for name, states in opt.state.items():
            out.update({f"{name[-1]}.{k}": t[every] for k, t in states.items()})
    return out


def _train(prefix: str, rank: int, world: int, book_a: Optional[RangeBook]) -> Tables:
    embs, opts = _build(prefix, book_a)
    if rank == 0:  # initial rows written by one rank (remote writes)
        for emb in embs:
            emb.weight[torch.arange(N)] = _init_table(emb.name[-1])
    embs[0].weight.comm.barrier()
    for chunks in _batches():
        for opt in opts:
            opt.zero_grad()
        loss = torch.zeros(())
        for c in range(rank, CHUNKS, world):
            ids, grads = chunks[c]
            for emb in embs:
                loss = loss + (emb(ids) * grads).sum()
        if loss.requires_grad:
            loss.backward()
        for opt in opts:
            opt.step()
    return _tables(embs, opts)


def _two_ranks(ckpt: str) -> Dict[str, Any]:
    ctx = DistContext.from_env(rpc_timeout=30)
    init_rpc(ctx, num_parts=ctx.world_size)
    tables = _train("s2_", ctx.rank, ctx.world_size, RangeBook([0, 9, N]))
    embs, opts = _build("s2_", RangeBook([0, 9, N]))  # the same, by name
    save_checkpoint(os.path.join(ckpt, "adam"), embeddings=embs[:2], optimizers=opts[:1])
    embs[2].save(os.path.join(ckpt, "table_g"))  # the per-object methods
    opts[1].save(os.path.join(ckpt, "adagrad"))
    failed_save = _save_failing_on_rank_one(os.path.join(ckpt, "adam"), embs[:2], opts[:1],
                                            ctx.rank)
    try:  # ranks saving different objects: the same error on every rank, nothing written
        save_checkpoint(os.path.join(ckpt, "adam"), embeddings=embs[:1 + ctx.rank])
        differ = ""
    except ValueError as exc:
        differ = str(exc)
    try:  # ranks that disagree on a tensor get an error, on every rank, without hanging
        DistTensor((N + ctx.rank, 2), name="disagree")
        mismatch = ""
    except ValueError as exc:
        mismatch = str(exc)
    try:  # bad input on one rank: its error there, a RuntimeError naming it on the others
        DistTensor((N, 2), name="bad_on_one", partition=[0, N + ctx.rank])
        one_bad = ""
    except (ValueError, RuntimeError) as exc:
        one_bad = f"{type(exc).__name__}: {exc}"
    shutdown_rpc()
    return {"tables": tables, "mismatch": mismatch, "one_bad": one_bad,
            "failed_save": failed_save, "differ": differ}


def _save_failing_on_rank_one(path: str, embs: List[DistEmbedding], opts: List[Any],
                              rank: int) -> str:
    """Overwrites every row, then saves into ``path`` with rank 1 failing after it
    wrote its first shard; returns this rank's error."""
    if rank == 0:
        for emb in embs:
            emb.weight[torch.arange(N)] = torch.zeros(N, D)
    embs[0].weight.comm.barrier()
    real_save = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        real_save(obj, f, *args, **kwargs)
        if rank == 1:
            raise OSError("disk full (injected)")
    torch.save = save
    try:
        save_checkpoint(path, embeddings=embs, optimizers=opts)
    except (OSError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        torch.save = real_save
    return ""


def _load(prefix_saved: str, ckpt: str) -> Tables:
    embs = [DistEmbedding(N, D, name=f"{prefix_saved}{k}") for k in "abg"]
    opts = [SparseAdam(embs[:2], lr=1.0), SparseAdagrad(embs[2], lr=1.0)]
    load_checkpoint(os.path.join(ckpt, "adam"), embeddings=embs[:2], optimizers=opts[:1])
    embs[2].load(os.path.join(ckpt, "table_g"))
    opts[1].load(os.path.join(ckpt, "adagrad"))
    assert (opts[0].lr, opts[0].betas, opts[0].eps, opts[1].lr) == (0.05, (0.8, 0.9), 1e-7, 0.2)
    return _tables(embs, opts)


def _three_ranks(ckpt: str) -> Dict[str, Tables]:
    ctx = DistContext.from_env(rpc_timeout=30)
    init_rpc(ctx, num_parts=ctx.world_size)
    tables = _train("s3_", ctx.rank, ctx.world_size, RangeBook([0, 5, 6, N]))
    loaded = _load("s2_", ckpt)
    shutdown_rpc()
    return {"tables": tables, "loaded": loaded}


def _assert_tables(got: Tables, expected: Tables, exact: bool = False) -> None:
    assert sorted(got) == sorted(expected)
    for key in expected:
        if exact:
            assert torch.equal(got[key], expected[key]), key
        else:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{key}: {m}")


@pytest.mark.timeout(600)
def test_updates_match_one_process_and_checkpoints_move_between_world_sizes(
        tmp_path: Path) -> None:
    reference = _train("s1_", 0, 1, None)  # the one-process run, in this process
    assert not torch.equal(reference["a"], _init_table("a"))
    assert int(reference["a.step"][0]) == STEPS  # rows shared by all ranks: once per step

    two = run_ranks(_two_ranks, 2, str(tmp_path), timeout=240)
    for rank, out in enumerate(two):
        _assert_tables(out["tables"], reference)
        assert "ranks disagree on the DistTensor" in out["mismatch"], out["mismatch"]
        assert f"rank 1: name='disagree', shape=({N + 1}, 2)" in out["mismatch"]
        error = f"ValueError: the tensor has {N} rows but its partition book"
        assert out["one_bad"].startswith(error if rank == 1 else "RuntimeError"), out["one_bad"]
        assert f"rank 1: {error}" in out["one_bad"] or rank == 1, out["one_bad"]
        failed = ("OSError: disk full (injected)" if rank == 1 else
                  "RuntimeError: saving checkpoint")
        assert out["failed_save"].startswith(failed), out["failed_save"]
        assert "rank 1: OSError: disk full" in out["failed_save"] or rank == 1
        assert "state differs between ranks in ['embedding.s2_b']" in out["differ"], \
            out["differ"]
    saved = two[0]["tables"]
    for out in two[1:]:
        _assert_tables(out["tables"], saved, exact=True)  # every rank reads the same rows

    three = run_ranks(_three_ranks, 3, str(tmp_path), timeout=240)
    for out in three:
        _assert_tables(out["tables"], reference)
        _assert_tables(out["loaded"], saved, exact=True)  # 2 ranks -> 3, not the failed save

    _assert_tables(_load("s2_", str(tmp_path)), saved, exact=True)  # 2 ranks -> 1


def _crash_mid_save(ckpt: str) -> Dict[str, Any]:
    """Saves a table, overwrites it, and saves again: rank 1 dies after writing its
    shard of the second save."""
    ctx = DistContext.from_env(rpc_timeout=30)
    init_rpc(ctx, num_parts=ctx.world_size)
    emb = DistEmbedding(N, D, name="crash_a", partition=RangeBook([0, 9, N]))
    if ctx.rank == 0:
        emb.weight[torch.arange(N)] = _init_table("a")
    emb.weight.comm.barrier()
    emb.save(ckpt)
    first = emb.weight[torch.arange(N)]
    if ctx.rank == 0:
        emb.weight[torch.arange(N)] = torch.zeros(N, D)
    emb.weight.comm.barrier()
    if ctx.rank == 1:
        real_save = torch.save

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            real_save(obj, f, *args, **kwargs)
            os._exit(3)  # killed after writing its shard
        torch.save = save
    try:
        emb.save(ckpt)
        error = ""
    except RuntimeError as exc:  # rank 0: the peer is gone
        error = str(exc)
    shutdown_rpc(graceful=False)
    return {"first": first, "error": error}


def _load_crashed(ckpt: str) -> torch.Tensor:
    ctx = DistContext.from_env(rpc_timeout=30)
    if ctx.world_size > 1:
        init_rpc(ctx, num_parts=ctx.world_size)
    emb = DistEmbedding(N, D, name="crash_a")
    emb.load(ckpt)
    rows = emb.weight[torch.arange(N)]
    shutdown_rpc()
    return rows


@pytest.mark.timeout(450)
def test_a_rank_dying_mid_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    rank0, _ = run_ranks(_crash_mid_save, 2, ckpt, timeout=180, may_die=[1])
    assert rank0["error"], "rank 0 finished a save its peer died in"
    assert torch.equal(rank0["first"], _init_table("a"))
    for rows in run_ranks(_load_crashed, 3, ckpt, timeout=180):
        assert torch.equal(rows, rank0["first"])
    assert torch.equal(_load_crashed(ckpt), rank0["first"])
