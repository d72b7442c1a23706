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
