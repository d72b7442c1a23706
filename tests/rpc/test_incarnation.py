"""The incarnation handshake (:mod:`pyg_dist.rpc._incarnation`) on an in-memory store,
with ranks as threads: what a dead incarnation left in the store is never taken for
the current one, and a missing rank is named within the timeout."""
from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional

import pytest
import torch.distributed as dist

pytestmark = pytest.mark.timeout(60)

from pyg_dist.rpc import _incarnation as incarnation
from pyg_dist.rpc import DistContext
from pyg_dist.rpc._incarnation import IncarnationError


def _agree_all(store: dist.Store, ranks: List[int], world_size: int, timeout: float = 10,
               delay: Optional[Dict[int, float]] = None, restart: int = 0) -> Dict[int, object]:
    """Runs :func:`incarnation.agree_incarnation` for ``ranks`` (threads); their ids or errors."""
    out: Dict[int, object] = {}

    def run(rank: int) -> None:
        time.sleep((delay or {}).get(rank, 0.0))
        try:
            out[rank] = incarnation.agree_incarnation(store, rank, world_size, timeout, restart)
        except IncarnationError as exc:
            out[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10)
    assert not any(t.is_alive() for t in threads), "a rank hangs"
    return out


def test_ranks_agree_on_one_fresh_id_per_incarnation():
    store = dist.HashStore()
    first = _agree_all(store, [0, 1, 2], 3)
    assert len(set(first.values())) == 1 and str(first[0]).startswith("0-")
    second = _agree_all(store, [0, 1, 2], 3, restart=1)
    assert len(set(second.values())) == 1 and str(second[0]).startswith("1-")
    assert second[0] != first[0]


def test_keys_of_a_dead_incarnation_are_never_taken_for_the_new_one():
    store = dist.HashStore()
    old = _agree_all(store, [0, 1], 2)[0]
    # a dead incarnation's rank 0 published a leader and died before welcoming anyone
    prefixed = dist.PrefixStore("pyg_dist/incarnation", store)
    prefixed.set("leader", "dead")
    prefixed.set("dead/ack/1", "stale-nonce")
    # the new rank 1 starts first and acknowledges the dead leader; rank 0 comes later
    new = _agree_all(store, [0, 1], 2, delay={0: 0.5})
    assert new[0] == new[1] and new[0] not in (old, "dead"), new


def test_a_missing_rank_is_named_within_the_timeout():
    store = dist.HashStore()
    started = time.monotonic()
    out = _agree_all(store, [0, 1], 3, timeout=1.0)
    assert time.monotonic() - started < 5
    assert isinstance(out[0], IncarnationError) and "rank(s) [2] of 3" in str(out[0])
    assert isinstance(out[1], IncarnationError) and "rank 1 was not welcomed" in str(out[1])


def test_without_rank_0_a_stale_leader_does_not_welcome_anyone():
    store = dist.HashStore()
    _agree_all(store, [0, 1], 2)  # a finished incarnation: its leader is still there
    out = _agree_all(store, [1], 2, timeout=1.0)
    assert isinstance(out[1], IncarnationError), out


def test_context_carries_restart_count_and_incarnation():
    env = {"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "3"}
    ctx = DistContext.from_env(env=env)
    assert ctx.restart_count == 3 and ctx.incarnation is None
    with pytest.raises(RuntimeError, match="incarnation is not agreed yet"):
        incarnation.current(ctx)
    worker = DistContext(rank=1, world_size=2, incarnation="3-abc")  # as workers get it
    assert incarnation.current(worker) == incarnation.ensure(worker, dist.HashStore()) == "3-abc"
    assert incarnation.current(DistContext()) == "solo"
    base = dist.HashStore()
    incarnation.scoped(base, "3-abc").set("health/0", "1")
    assert base.check(["pyg_dist/3-abc/health/0"])
