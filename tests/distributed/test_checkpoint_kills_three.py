"""The checkpoint kill walk of ``test_checkpoint_kills.py`` (see there) on 3 ranks.

The whole matrix, every phase x every rank of 3, but only the phases around the switch
(``digests``, ``info``, ``latest``, ``pruning``) for ranks 0 and 2 and ``load_restore``
for rank 2 run by default; the other 30 cases run when ``PYG_DIST_FULL_WALK=1`` is set
(``PYG_DIST_FULL_WALK=1 bash scripts/test.sh tests/distributed/test_checkpoint_kills_three.py``):
ranks other than 0 all play the same part, so they add little to the 2-rank walk, which
kills every rank at every phase.
"""
from __future__ import annotations

import os
from typing import Any, List, Tuple

import pytest

from test_checkpoint_kills import parts, reference, walk_load, walk_save  # noqa: F401
from checkpoint_kill import LOAD_PHASES, SAVE_PHASES

FULL = pytest.mark.skipif(os.environ.get("PYG_DIST_FULL_WALK") != "1",
                          reason="the full 3-rank matrix runs with PYG_DIST_FULL_WALK=1")
pytestmark = pytest.mark.multiprocess


def three_rank_cases(phases: List[str], critical: List[Tuple[str, int]]) -> List[Any]:
    """Every phase x every rank of 3; those not in ``critical`` are ``serial`` and run
    only with ``PYG_DIST_FULL_WALK=1``."""
    return [pytest.param(phase, rank, marks=() if (phase, rank) in critical
                         else (pytest.mark.serial, FULL), id=f"{phase}-{rank}")
            for phase in phases for rank in range(3)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("phase, rank", three_rank_cases(
    list(SAVE_PHASES), [(p, r) for p in ("digests", "info", "latest", "pruning") for r in (0, 2)]))
def test_kill_in_save_three_ranks(parts, reference, tmp_path, phase, rank):
    walk_save(parts, reference, tmp_path, 3, phase, rank)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("phase, rank", three_rank_cases(list(LOAD_PHASES),
                                                         [("load_restore", 2)]))
def test_kill_in_load_three_ranks(parts, reference, tmp_path, phase, rank):
    walk_load(parts, reference, tmp_path, 3, phase, rank)
