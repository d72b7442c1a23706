"""The default process group and pyg_dist's own gloo group, with the job's guarantees.

Collectives (DDP's gradient all-reduce and pyg_dist's own) time out after the job's
timeout (``DistContext.rpc_timeout``) instead of torch's 30 minutes, meet under this
incarnation's keys of torchrun's store (:mod:`pyg_dist.rpc._incarnation`), and a
stalled or failed rank is named by the health watchdog (:mod:`pyg_dist.rpc._health`).
"""
from __future__ import annotations

import atexit
import logging
import os
from datetime import timedelta
from typing import Any, Dict, Optional

import torch.distributed as dist

from pyg_dist.rpc import _health as health, _incarnation as incarnation, _network as network, _stores as stores
from pyg_dist.rpc._context import DistContext
from pyg_dist.rpc._stores import store_address

log = logging.getLogger("pyg_dist")


def _check_ranks(ctx: DistContext) -> None:
    """The context must describe this process as the default group does."""
    if dist.is_initialized() and (dist.get_rank(), dist.get_world_size()) != \
            (ctx.rank, ctx.world_size):
        raise ValueError(f"the DistContext says rank {ctx.rank} of {ctx.world_size}, but the "
                         f"process group says rank {dist.get_rank()} of "
                         f"{dist.get_world_size()}")


def init_process_group(backend: Optional[str] = None, ctx: Optional[DistContext] = None,
                       **kwargs: Any) -> DistContext:
    """``torch.distributed.init_process_group`` with pyg_dist's guarantees.

    Collectives (DDP's gradient all-reduce included) time out after the job's timeout
    (``ctx.rpc_timeout``, ``PYG_DIST_RPC_TIMEOUT``) instead of torch's 30 minutes; a
    stalled or failed rank is named by the health watchdog; listeners use the
    interface that reaches ``MASTER_ADDR``. The group meets under this incarnation's
    keys of the rendezvous store, so it forms again after torchrun restarted the
    workers (torch's own ``env://`` initialisation reads the dead incarnation's
    addresses). Outside ``torchrun`` (one plain process) a one-rank group is created
    in memory.

    Args:
        backend (str, optional): ``"gloo"`` (default) or ``"nccl"``.
        ctx (DistContext, optional): this process (default: from torchrun's env).
        **kwargs: passed on to ``torch.distributed.init_process_group``.

    Returns:
        the context used.
    """
    ctx = ctx or DistContext.from_env()
    if not dist.is_initialized():
        kwargs.setdefault("timeout", timedelta(seconds=ctx.rpc_timeout))
        network.choose_interfaces(store_address(ctx)[0])
        if ctx.is_distributed:
            stores.init_scoped(backend or "gloo", ctx, **kwargs)
        elif "MASTER_PORT" in os.environ:
            dist.init_process_group(backend or "gloo", init_method="env://", rank=ctx.rank,
                                    world_size=ctx.world_size, **kwargs)
        else:
            dist.init_process_group(backend or "gloo", store=dist.HashStore(), rank=0,
                                    world_size=1, **kwargs)
    _check_ranks(ctx)
    incarnation.ensure(ctx, stores.base_store(ctx))  # also when user code made the group
    health.start(ctx, store_address(ctx))
    return ctx


_CPU_GROUP: Dict[str, Any] = {}


def ensure_process_group(ctx: DistContext) -> Any:
    """Initialises the default process group if user code did not (see
    :func:`init_process_group`), and returns the gloo group of pyg_dist's collectives,
    created once per default group with the job's timeout whatever the default
    group's is (a collective the first time)."""
    init_process_group("gloo", ctx)
    default = dist.distributed_c10d._get_default_group()
    if _CPU_GROUP.get("default") is not default:  # a new default group: a new own group
        if not _CPU_GROUP:
            atexit.register(_destroy_cpu_group)
        _CPU_GROUP.update(default=default, group=dist.new_group(
            backend="gloo", timeout=timedelta(seconds=ctx.rpc_timeout)))
    return _CPU_GROUP["group"]


def _destroy_cpu_group() -> None:
    """Destroys pyg_dist's own gloo group at exit, while the interpreter is whole (a
    group left to static destructors can abort the process as it exits)."""
    group = _CPU_GROUP.pop("group", None)
    default = _CPU_GROUP.pop("default", None)
    if group is None or not dist.is_initialized() or \
            dist.distributed_c10d._get_default_group() is not default:
        return  # the user destroyed the default group, and ours with it
    try:
        dist.destroy_process_group(group)
    except (RuntimeError, ValueError) as exc:  # exiting: nothing left to tell
        log.debug("pyg_dist: destroying its gloo group at exit failed: %s", exc)
