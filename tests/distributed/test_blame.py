"""A stalled rank is named by the error the other ranks get, also when it came back just
before their collective timed out (a SIGSTOP as long as the timeout: the stopped rank
resumes, its heartbeat moves again, and the waiting rank's error named nobody; the
resumed rank then blamed the rank that had waited on it)."""
from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta
from typing import Dict, List

import pytest

from pyg_dist.testing import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here starts processes

TIMEOUT = 8.0  # PYG_DIST_RPC_TIMEOUT: the collectives' timeout (heartbeat every 0.4 s)


def _stop_until(pid: int, seconds: float, stopped: List[int]) -> None:
    """SIGSTOPs ``pid`` and SIGCONTs it after ``seconds`` (and records it for teardown)."""
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    threading.Timer(seconds, os.kill, (pid, signal.SIGCONT)).start()


def _rank0(pids: List[int], group) -> Dict[str, str]:
    import torch
    import torch.distributed as dist

    from pyg_dist.rpc import _health as health
    from pyg_dist.rpc._agreement import PeerFailedError, exchange

    out, stopped = {}, []
    try:
        # like DDP's gradient all-reduce: torch's own error, then the hook's line
        _stop_until(pids[1], TIMEOUT - 2, stopped)
        try:
            dist.all_reduce(torch.ones(1), group=group)
            out["raw"] = "the all-reduce did not fail"
        except RuntimeError as exc:
            out["raw"] = f"{str(exc).splitlines()[0]} | {health.diagnose()}"
        # the first stall is forgotten: the watchdog recalls a silence for TIMEOUT plus
        # two heartbeats (0.8 s) after it ended, and it ended 2 s before the timeout
        time.sleep(TIMEOUT + 3)
        _stop_until(pids[1], TIMEOUT - 2, stopped)
        try:  # pyg_dist's own collective
            exchange(None, "waiting for every rank", 2)
            out["exchange"] = "the exchange did not fail"
        except PeerFailedError as exc:
            out["exchange"] = str(exc)
            health.report_failure(exc)  # as an uncaught error does on its way out
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        _store().set(GAVE_UP, "1")
    return out


GAVE_UP = "test_blame/rank 0 gave up"


def _store():
    """A client of the run's rendezvous store (hosted by :func:`run_ranks`)."""
    import torch.distributed as dist

    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         is_master=False)


def _stall_job() -> Dict[str, str]:
    import torch.distributed as dist

    import pyg_dist
    from pyg_dist.rpc._agreement import PeerFailedError, exchange

    ctx = pyg_dist.init_process_group("gloo")
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=TIMEOUT))
    pids = exchange(os.getpid(), "pids", ctx.world_size)
    time.sleep(1.0)  # heartbeats flow
    if ctx.rank == 0:
        return _rank0(pids, group)
    # until rank 0 gave up on it (~4 timeouts; a fixed sleep of 5 was longer, or under
    # load shorter): stopped twice meanwhile, and late to both collectives
    _store().wait([GAVE_UP], timedelta(seconds=20 * TIMEOUT))
    try:
        exchange(None, "late", 2)
    except PeerFailedError as exc:
        return {"late": str(exc)}
    return {"late": "the late exchange did not fail"}


@pytest.mark.serial  # wall-clock stalls
@pytest.mark.timeout(240)
def test_a_rank_stopped_until_just_before_the_timeout_is_named():
    out = run_ranks(_stall_job, 2, timeout=200,
                    extra_env={"PYG_DIST_RPC_TIMEOUT": str(int(TIMEOUT)),
                               "PYG_DIST_WATCHDOG": "warn"})
    raw, waited, late = out[0]["raw"], out[0]["exchange"], out[1]["late"]
    assert "rank 1 sent no heartbeat for" in raw, raw
    assert "rank 1 sent no heartbeat for" in waited and "waiting for every rank" in waited, waited
    # the resumed rank reads that rank 0 gave up on it, naming it, not only "rank 0 failed"
    assert "rank 0 failed" in late and "rank 1 sent no heartbeat for" in late, late
