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
    from pyg_dist.sampler.warmup import warm_up

    return warm_up()


@pytest.mark.timeout(60)
def test_forked_ranks_start_with_the_kernels_loaded() -> None:
    """The fork server warmed numba up once (pyg_dist.loader.preload): a forked rank's
    warm_up() has nothing left to do; a spawned one loads every kernel itself."""
    assert run_ranks(_warm_up_seconds, 2, timeout=30) == [0.0, 0.0]
    assert run_ranks(_warm_up_seconds, 1, timeout=60, start_method="spawn")[0] > 0.0
