"""The library's test hooks: the one module that reads ``PYG_DIST_TEST_*`` variables.

Tests set these variables to make library code fail on purpose at a named point, so the
failure paths can be checked on real processes. Without the variable nothing happens.
This module imports nothing from pyg_dist (any layer may call it without a cycle).

========================================  ==================================================
variable                                  what it does
========================================  ==================================================
``PYG_DIST_TEST_PARTITION_KILL``          ``<phase>:<rank>``: the distributed partitioner's
                                          rank ``rank`` SIGKILLs itself when it reaches
                                          ``phase`` (:func:`kill_if_requested`)
``PYG_DIST_TEST_PARTITION_UNSHARED``      ``1``: the distributed partitioner's ranks behave
                                          as if each ran on a machine of its own (no shared
                                          output folder; :func:`partition_unshared`)
========================================  ==================================================

Faults of a training job (kill a rank after batch ``k``, die in the middle of a checkpoint
write) are not hooks in the library or the examples: :mod:`pyg_dist.testing.instrument`
attaches them from outside.
"""
from __future__ import annotations

import os
import signal
from typing import Dict

PARTITION_KILL = "PYG_DIST_TEST_PARTITION_KILL"
PARTITION_UNSHARED = "PYG_DIST_TEST_PARTITION_UNSHARED"

#: every hook: variable -> what it does (the table above)
HOOKS: Dict[str, str] = {
    PARTITION_KILL: "<phase>:<rank>: that rank of the distributed partitioner SIGKILLs "
                    "itself on reaching the phase",
    PARTITION_UNSHARED: "1: the distributed partitioner's ranks act as if on separate "
                        "machines (no shared output folder)",
}


def kill_if_requested(phase: str, rank: int) -> None:
    """SIGKILLs this process when ``PYG_DIST_TEST_PARTITION_KILL`` is ``<phase>:<rank>``.

    Args:
        phase (str): the phase the caller reached, e.g. ``"order_edges"``.
        rank (int): the caller's rank.
    """
    if os.environ.get(PARTITION_KILL) == f"{phase}:{rank}":
        os.kill(os.getpid(), signal.SIGKILL)


def partition_unshared() -> bool:
    """Whether ``PYG_DIST_TEST_PARTITION_UNSHARED=1`` asks the distributed partitioner to
    act as if every rank had a machine of its own."""
    return os.environ.get(PARTITION_UNSHARED) == "1"
