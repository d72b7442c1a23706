"""One-process tests of the RPC runtime's pure pieces."""
from __future__ import annotations

import asyncio
import logging

import pytest
import torch

from pyg_dist.rpc import _network as network
from pyg_dist.rpc._agreement import DisagreementError, agree, describe_values
from pyg_dist.rpc._registry import RemoteFailure, RpcRemoteError, dispatch, lookup
from pyg_dist.rpc._routing import fan_out, group_by_owner, split_by_owner


def test_interface_reaching_loopback_is_lo(monkeypatch):
    monkeypatch.delenv(network.GLOO_ENV, raising=False)
    monkeypatch.delenv(network.TP_ENV, raising=False)
    assert network.choose_interfaces("127.0.0.1") == "lo"
    import os
    assert os.environ[network.GLOO_ENV] == os.environ[network.TP_ENV] == "lo"


def test_a_user_choice_of_interface_is_kept_for_both(monkeypatch):
    monkeypatch.setenv(network.GLOO_ENV, "eth7")
    monkeypatch.delenv(network.TP_ENV, raising=False)
    assert network.choose_interfaces("127.0.0.1") == "eth7"
    import os
    assert os.environ[network.TP_ENV] == "eth7"


def test_tensorpipe_leaves_out_shared_memory_unless_asked(monkeypatch):
    monkeypatch.delenv(network.SHM_ENV, raising=False)
    monkeypatch.delenv(network.NETWORK_ONLY_ENV, raising=False)
    assert network.tensorpipe_options() == {"_transports": ["uv"]}
    monkeypatch.setenv(network.SHM_ENV, "1")
    assert network.tensorpipe_options() == {}  # TensorPipe's defaults, shm included
    monkeypatch.setenv(network.SHM_ENV, "0")
    monkeypatch.setenv(network.NETWORK_ONLY_ENV, "yes")
    assert network.tensorpipe_options() == {"_transports": ["uv"], "_channels": ["basic"]}
    monkeypatch.setenv(network.SHM_ENV, "true")
    with pytest.raises(ValueError, match="PYG_DIST_RPC_NETWORK_ONLY=1 and PYG_DIST_RPC_SHM=1"):
        network.tensorpipe_options()
    monkeypatch.setenv(network.NETWORK_ONLY_ENV, "0")
    monkeypatch.setenv(network.SHM_ENV, "on")
    with pytest.raises(ValueError, match="PYG_DIST_RPC_SHM must be 0 or 1, got 'on'"):
        network.tensorpipe_options()


def test_values_are_grouped_by_rank():
    text = describe_values(["a", "b", "a"])
    assert text == "ranks 0, 2: 'a'; rank 1: 'b'"


def test_agree_alone_raises_its_own_error_and_returns_infos():
    assert agree("x", {"k": 1}, 1, info={"n": 3}) == [{"n": 3}]
    with pytest.raises(KeyError, match="mine"):
        agree("x", {"k": 1}, 1, error=KeyError("mine"))
    assert issubclass(DisagreementError, ValueError)


def test_a_callee_error_keeps_its_builtin_type():
    failure = dispatch("no.such.callee")
    assert isinstance(failure, RemoteFailure) and failure.kind == "KeyError"
    exc = failure.to_exception("RPC 'x' on worker w-1")
    assert isinstance(exc, KeyError) and "worker w-1" in str(exc) and "no.such.callee" in str(exc)
    custom = RemoteFailure("PartitionFormatError", "bad file", "trace").to_exception("w")
    assert isinstance(custom, RpcRemoteError) and "bad file" in str(custom)


def test_split_by_owner_is_stable_and_checks_range():
    ids = torch.tensor([5, 0, 9, 3, 4, 8])
    out = split_by_owner(ids, [0, 3, 6, 10])
    assert [(o, p.tolist()) for o, p in out] == [(0, [1]), (1, [0, 3, 4]), (2, [2, 5])]
    assert split_by_owner(torch.empty(0, dtype=torch.long), [0, 3]) == []
    with pytest.raises(ValueError, match="out of range"):
        split_by_owner(torch.tensor([10]), [0, 3, 10])


@pytest.mark.parametrize("owners", [2, 3, 20])  # 20: owners found by binary search
def test_group_by_owner_gives_each_owners_positions_and_ids(owners):
    g = torch.Generator().manual_seed(owners)
    offsets = [0] + torch.randint(1, 50, (owners,), generator=g).cumsum(0).tolist()
    offsets[2] = offsets[1]  # an owner of nothing
    ids = torch.randint(0, offsets[-1], (400,), generator=g, dtype=torch.int32)
    got = group_by_owner(ids, offsets)
    owner = torch.searchsorted(torch.tensor(offsets[1:]), ids.long(), right=True)
    expected = [(o, torch.nonzero(owner == o).view(-1)) for o in range(owners)]
    expected = [(o, pos) for o, pos in expected if pos.numel()]
    assert [(o, p.tolist()) for o, p, _ in got] == [(o, p.tolist()) for o, p in expected]
    for _, pos, owned in got:
        assert owned.dtype == torch.long and owned.tolist() == ids[pos].tolist()


def test_fan_out_waits_for_every_reply_before_raising(caplog):
    """The first failure is raised only after every request settled, none unretrieved."""
    async def reply(value, delay):
        await asyncio.sleep(delay)
        if isinstance(value, Exception):
            raise value
        return value

    seen, ran = [], []

    async def main():
        requests = [(i, asyncio.ensure_future(reply(v, d))) for i, (v, d) in enumerate(
            [(ValueError("first"), 0.01), (RuntimeError("second"), 0.02), (7, 0.03)])]
        with pytest.raises(ValueError, match="first"):
            await fan_out(requests, lambda: ran.append(True), lambda t, r: seen.append(r))
        assert all(task.done() for _, task in requests)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(main())
    assert ran == [True] and seen == []  # replies after a failure are not used
    assert "never retrieved" not in caplog.text


def test_unknown_callee_names_the_registered_ones_and_their_modules():
    import pyg_dist.embedding._shards  # noqa: F401  (registers embedding.read when imported)
    from pyg_dist.sampler._serving import CALLEE_MODULES

    with pytest.raises(KeyError, match="no pyg_dist RPC callee named 'no.such'") as err:
        lookup("no.such")
    for name in ("sampler.hop", "sampler.features", "sampler.has_edges"):
        assert lookup(name).__module__ in {m.__name__ for m in CALLEE_MODULES}
        assert name in str(err.value)
    assert lookup("embedding.read").__module__ == "pyg_dist.embedding._shards"
