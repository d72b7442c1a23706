"""``run_ranks``: a test launcher that cannot pass wrongly."""
from __future__ import annotations

import atexit
import os

import pytest

from pyg_dist.testing import RanksFailed, run_ranks

pytestmark = pytest.mark.multiprocess  # every test here starts processes


def _crash_in_shutdown() -> int:
    """Reports a result, then dies at exit (as a crash in a shutdown hook would)."""
    if int(os.environ["RANK"]) == 1:
        atexit.register(os._exit, 3)
    return 7


@pytest.mark.timeout(60)
def test_a_rank_that_crashes_after_its_result_fails_the_run() -> None:
    with pytest.raises(RanksFailed, match=r"rank 1 .*exited with code 3"):
        run_ranks(_crash_in_shutdown, 2, timeout=30)


def _warm_up_seconds() -> float:
    from pyg_dist.sampler._warmup import warm_up

    return warm_up()


@pytest.mark.timeout(60)
def test_forked_ranks_start_with_the_kernels_loaded() -> None:
    """The fork server warmed numba up once (pyg_dist.loader._preload): a forked rank's
    warm_up() has nothing left to do; a spawned one loads every kernel itself."""
    assert run_ranks(_warm_up_seconds, 2, timeout=30) == [0.0, 0.0]
    assert run_ranks(_warm_up_seconds, 1, timeout=60, start_method="spawn")[0] > 0.0


def _parents_of_rank_and_its_worker() -> tuple:
    """This rank's parent and pid, and the parent of a process it starts the way sampler
    workers start."""
    from pyg_dist.loader._workers import worker_context

    ctx = worker_context()
    out, into = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_send_parent, args=(into,))
    proc.start()
    into.close()
    worker_parent = out.recv()
    proc.join(10)
    return os.getppid(), os.getpid(), worker_parent, proc.exitcode


def _send_parent(into) -> None:
    into.send(os.getppid())


@pytest.mark.timeout(60)
def test_forked_ranks_fork_their_workers_from_the_same_server() -> None:
    """A forked rank's sampler workers come from the fork server that forked the rank
    (which imported everything once), not from a server of the rank's own (a fresh
    interpreter per rank)."""
    for server, rank, worker_parent, code in run_ranks(_parents_of_rank_and_its_worker, 2,
                                                       timeout=30):
        assert worker_parent == server != rank and code == 0


@pytest.mark.timeout(60)
def test_a_start_method_per_rank_must_name_every_rank() -> None:
    with pytest.raises(ValueError, match=r"one per rank \(2\), got 1"):
        run_ranks(_warm_up_seconds, 2, start_method=["spawn"])
    with pytest.raises(ValueError, match="must be 'forkserver' or 'spawn'"):
        run_ranks(_warm_up_seconds, 2, start_method=["forkserver", "fork"])
