"""Joining the ranks of a ``torchrun`` job for multi-machine partitioning."""
from __future__ import annotations

from datetime import timedelta

from pyg_dist.partition._distributed.comm import ArrayComm
from pyg_dist.rpc import DistContext
from pyg_dist.rpc._process_group import init_process_group

#: collectives wait while rank 0 runs METIS; a dead or silent rank is caught by the
#: health watchdog's heartbeats instead of this timeout
COLLECTIVE_TIMEOUT_S = 3600.0


def join_ranks() -> ArrayComm:
    """Initialises the gloo process group from ``torchrun``'s environment (with the
    health watchdog) and returns this rank's :class:`ArrayComm`."""
    ctx = DistContext.from_env()
    ctx = init_process_group("gloo", ctx=ctx, timeout=timedelta(
        seconds=max(ctx.rpc_timeout, COLLECTIVE_TIMEOUT_S)))
    return ArrayComm(ctx.rank, ctx.world_size)
