"""DistEmbedding + sparse optimizers on 2 and 3 real processes vs. one process.

The same global batches (six chunks per step) are split over the ranks (chunk ``c``
goes to rank ``c % world_size``); the tables and optimizer state must match a
one-process run. Every chunk uses rows 0 and N-1, so several ranks update the same
rows in the same step; in step 1 some ranks have nothing to send. The 2-rank run
saves a checkpoint that is loaded on 3 ranks and on 1, and checks that creation
errors reach every rank.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

from pyg_dist.embedding import DistEmbedding, DistTensor, SparseAdagrad, SparseAdam
from pyg_dist.partition.book import RangeBook
from pyg_dist.rpc import DistContext, init_rpc, shutdown_rpc
from pyg_dist.testing import run_ranks

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
    for emb in embs:
        emb.save(os.path.join(ckpt, f"emb_{emb.name}"))
    for i, opt in enumerate(opts):
        opt.save(os.path.join(ckpt, f"opt_{i}"))
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
    return {"tables": tables, "mismatch": mismatch, "one_bad": one_bad}


def _load(prefix_saved: str, ckpt: str) -> Tables:
    embs = [DistEmbedding(N, D, name=f"{prefix_saved}{k}") for k in "abg"]
    opts = [SparseAdam(embs[:2], lr=1.0), SparseAdagrad(embs[2], lr=1.0)]
    for emb in embs:
        emb.load(os.path.join(ckpt, f"emb_{emb.name}"))
    for i, opt in enumerate(opts):
        opt.load(os.path.join(ckpt, f"opt_{i}"))
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


@pytest.mark.timeout(150)
def test_updates_match_one_process_and_checkpoints_move_between_world_sizes(
        tmp_path: Path) -> None:
    reference = _train("s1_", 0, 1, None)  # the one-process run, in this process
    assert not torch.equal(reference["a"], _init_table("a"))
    assert int(reference["a.step"][0]) == STEPS  # rows shared by all ranks: once per step

    two = run_ranks(_two_ranks, 2, str(tmp_path), timeout=90)
    for rank, out in enumerate(two):
        _assert_tables(out["tables"], reference)
        assert "ranks disagree on the DistTensor" in out["mismatch"], out["mismatch"]
        assert f"rank 1: name='disagree', shape=({N + 1}, 2)" in out["mismatch"]
        error = f"ValueError: the tensor has {N} rows but its partition book"
        assert out["one_bad"].startswith(error if rank == 1 else "RuntimeError"), out["one_bad"]
        assert f"rank 1: {error}" in out["one_bad"] or rank == 1, out["one_bad"]
    saved = two[0]["tables"]
    for out in two[1:]:
        _assert_tables(out["tables"], saved, exact=True)  # every rank reads the same rows

    three = run_ranks(_three_ranks, 3, str(tmp_path), timeout=90)
    for out in three:
        _assert_tables(out["tables"], reference)
        _assert_tables(out["loaded"], saved, exact=True)  # 2 ranks -> 3 ranks

    _assert_tables(_load("s2_", str(tmp_path)), saved, exact=True)  # 2 ranks -> 1
