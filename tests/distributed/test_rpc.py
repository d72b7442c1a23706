"""RPC runtime: rendezvous via torchrun's store, callees by name, errors naming peers."""
from __future__ import annotations

import os
import time

import pytest
import torch

from pyg_dist.rpc import DistContext, RpcPeerError, callee, current, init_rpc, shutdown_rpc
from pyg_dist.testing import RanksFailed, run_ranks


@callee("test.echo")
def _echo(x: torch.Tensor, tag: str) -> tuple:
    return x * 2, f"{tag} served by rank {current().rank}"


@callee("test.fail")
def _fail(code: int) -> None:
    raise ValueError(f"boom {code}")


def _roundtrip() -> dict:
    ctx = DistContext.from_env(rpc_timeout=20)
    group = init_rpc(ctx, num_parts=ctx.world_size)
    out = {}
    for peer in range(ctx.world_size):
        value, who = group.call(peer, "test.echo", torch.arange(3) + peer, f"from {ctx.rank}")
        assert torch.equal(value, (torch.arange(3) + peer) * 2)
        out[peer] = who
    try:
        group.call((ctx.rank + 1) % ctx.world_size, "test.fail", 42)
    except ValueError as exc:
        out["error"] = str(exc)
    shutdown_rpc()
    return out


@pytest.mark.timeout(120)
def test_calls_between_three_ranks_and_remote_errors() -> None:
    results = run_ranks(_roundtrip, 3, timeout=90)
    for rank, out in enumerate(results):
        assert out[(rank + 1) % 3] == f"from {rank} served by rank {(rank + 1) % 3}"
        nxt = (rank + 1) % 3
        assert "boom 42" in out["error"] and f"trainers0-{nxt}" in out["error"], out["error"]


def _peer_dies() -> str:
    ctx = DistContext.from_env(rpc_timeout=15)
    group = init_rpc(ctx, num_parts=ctx.world_size)
    group.call(1 - ctx.rank, "test.echo", torch.ones(1), "warm-up")
    torch.distributed.barrier()  # both warm-ups answered before rank 1 goes
    if ctx.rank == 1:
        os._exit(17)  # killed mid-job
    time.sleep(1.0)
    start = time.monotonic()
    try:
        group.call(1, "test.echo", torch.ones(1), "after death")
    except RpcPeerError as exc:
        shutdown_rpc(graceful=False)
        return f"{time.monotonic() - start:.1f}s {exc}"
    raise AssertionError("a call to a dead peer succeeded")


@pytest.mark.timeout(120)
def test_dead_peer_is_named_within_the_timeout() -> None:
    results = run_ranks(_peer_dies, 2, timeout=60, may_die=[1])
    seconds, message = results[0].split("s ", 1)
    assert float(seconds) < 20, message
    assert "trainers0-1" in message and "rank 1" in message, message


def _raises_on_rank_one() -> None:
    if int(os.environ["RANK"]) == 1:
        raise KeyError("rank one broke")


@pytest.mark.timeout(60)
def test_launcher_reports_child_traceback() -> None:
    with pytest.raises(RanksFailed, match="rank 1 failed(.|\n)*rank one broke"):
        run_ranks(_raises_on_rank_one, 2, timeout=30)
