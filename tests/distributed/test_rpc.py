"""RPC runtime: rendezvous via torchrun's store, callees by name, errors naming peers."""
from __future__ import annotations

import gc
import logging
import os
import time

import pytest
import torch

from pyg_dist.rpc import DistContext, RpcPeerError, callee, current, join_rpc, shutdown_rpc
from pyg_dist.testing import RanksFailed, run_ranks

pytestmark = pytest.mark.multiprocess  # every test here starts processes


#: seconds each rank sleeps after joining: TensorPipe's shared-memory transport (left out
#: by default) polls without sleeping, so a joined rank used a whole core meanwhile
IDLE_S = 1.5


@callee("test.echo")
def _echo(x: torch.Tensor, tag: str) -> tuple:
    return x * 2, f"{tag} served by rank {current().rank}"


@callee("test.fail")
def _fail(code: int) -> None:
    raise ValueError(f"boom {code}")


@callee("test.attribute_error")
def _attribute_error() -> None:
    return None.missing  # type: ignore[attr-defined]


def _roundtrip() -> dict:
    ctx = DistContext.from_env(rpc_timeout=20)
    group = join_rpc(ctx, num_parts=ctx.world_size)
    cpu = time.process_time()
    time.sleep(IDLE_S)
    out = {"idle_cpu_s": time.process_time() - cpu}
    for peer in range(ctx.world_size):
        value, who = group.call(peer, "test.echo", torch.arange(3) + peer, f"from {ctx.rank}")
        assert torch.equal(value, (torch.arange(3) + peer) * 2)
        out[peer] = who
    try:
        group.call((ctx.rank + 1) % ctx.world_size, "test.fail", 42)
    except ValueError as exc:
        out["error"] = str(exc)
    try:
        group.call((ctx.rank + 1) % ctx.world_size, "test.attribute_error")
    except Exception as exc:  # the type is what the test checks
        out["attribute"] = f"{type(exc).__name__}: {exc}"
    shutdown_rpc()
    return out


@pytest.mark.timeout(120)
def test_calls_between_three_ranks_and_remote_errors() -> None:
    results = run_ranks(_roundtrip, 3, timeout=90)
    for rank, out in enumerate(results):
        # 0.01 s here by default; up to the whole 1.5 s with the shared-memory transport
        assert out["idle_cpu_s"] < 0.3 * IDLE_S, f"rank {rank} spun while idle: {out}"
        assert out[(rank + 1) % 3] == f"from {rank} served by rank {(rank + 1) % 3}"
        nxt = (rank + 1) % 3
        assert "boom 42" in out["error"] and f"trainers0-{nxt}" in out["error"], out["error"]
        # a callee's own error is never mistaken for a dead peer
        attribute = out["attribute"]
        assert attribute.startswith("AttributeError") and "missing" in attribute, attribute
        assert "died" not in attribute and f"trainers0-{nxt}" in attribute, attribute


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie waiting for its parent counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _peer_dies() -> str:
    ctx = DistContext.from_env(rpc_timeout=15)
    group = join_rpc(ctx, num_parts=ctx.world_size)
    group.call(1 - ctx.rank, "test.echo", torch.ones(1), "warm-up")
    pids = [None, None]
    torch.distributed.all_gather_object(pids, os.getpid())  # also: both warm-ups answered
    if ctx.rank == 1:
        os._exit(17)  # killed mid-job
    deadline = time.monotonic() + 10
    while not _gone(pids[1]) and time.monotonic() < deadline:  # wait for the death itself
        time.sleep(0.05)
    assert _gone(pids[1]), "rank 1 did not exit"
    errors = []
    asyncio_log = logging.getLogger("asyncio")
    handler = _Collect(errors)
    asyncio_log.addHandler(handler)
    start = time.monotonic()
    try:
        group.loop.run(_several_calls(group), timeout=30)
    except RpcPeerError as exc:
        seconds = time.monotonic() - start
        gc.collect()  # futures dropped unretrieved would be reported now
        time.sleep(0.5)
        shutdown_rpc(graceful=False)
        asyncio_log.removeHandler(handler)
        return f"{seconds:.1f}s {len(errors)} unretrieved {exc}"
    raise AssertionError("a call to a dead peer succeeded")


async def _several_calls(group) -> None:
    """Three requests in flight to the dead peer at once (as a hop or a fetch sends)."""
    from pyg_dist.rpc import gather_all
    await gather_all(*[group.call_async(1, "test.echo", torch.ones(1), f"after death {i}")
                       for i in range(3)])


class _Collect(logging.Handler):
    def __init__(self, sink: list) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


@pytest.mark.timeout(120)
def test_dead_peer_is_named_within_the_timeout() -> None:
    results = run_ranks(_peer_dies, 2, timeout=60, may_die=[1])
    seconds, unretrieved, message = results[0].split(" ", 2)
    assert float(seconds[:-1]) < 20, message
    assert "trainers0-1" in message and "rank 1" in message, message
    assert unretrieved == "0", f"{unretrieved} exceptions were never retrieved: {message}"


def _raises_on_rank_one() -> None:
    if int(os.environ["RANK"]) == 1:
        raise KeyError("rank one broke")


@pytest.mark.timeout(60)
def test_launcher_reports_child_traceback() -> None:
    with pytest.raises(RanksFailed, match="rank 1 failed(.|\n)*rank one broke"):
        run_ranks(_raises_on_rank_one, 2, timeout=30)
