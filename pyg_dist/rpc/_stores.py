"""The job's rendezvous store: where it is, and the part of it this incarnation uses.

torchrun keeps one store for the whole job, across restarts of the workers; pyg_dist
reads and writes only the keys of the current incarnation
(:mod:`pyg_dist.rpc._incarnation`).
"""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Optional, Tuple

import torch.distributed as dist

from pyg_dist.rpc import _incarnation as incarnation
from pyg_dist.rpc._context import DistContext

log = logging.getLogger("pyg_dist")


def _default_store() -> Optional[dist.Store]:
    """The default process group's store without its prefixes, if there is a group."""
    if not dist.is_initialized():
        return None
    store = dist.distributed_c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def store_address(ctx: DistContext) -> Tuple[str, int]:
    """Where the job's rendezvous store listens: the default process group's (also when
    it was initialised with a ``tcp://`` address, as scripts started with
    ``torch.multiprocessing.spawn`` do), else ``MASTER_ADDR:MASTER_PORT``."""
    store = _default_store()
    if isinstance(store, dist.TCPStore):
        return str(store.host), int(store.port)
    return ctx.master_addr, ctx.master_port


def base_store(ctx: DistContext) -> dist.Store:
    """The job's rendezvous store, unscoped: the default process group's (without its
    prefixes), or a client of torchrun's."""
    store = _default_store()
    if store is not None:
        return store
    return dist.TCPStore(ctx.master_addr, ctx.master_port, is_master=False,
                         timeout=timedelta(seconds=ctx.rpc_timeout))


def job_store(ctx: DistContext) -> dist.Store:
    """The job's store, scoped to this incarnation (agreed already)."""
    return incarnation.scoped(base_store(ctx), incarnation.current(ctx))


def init_scoped(backend: str, ctx: DistContext, **kwargs: Any) -> None:
    """The default process group, meeting under this incarnation's keys of the store
    at ``ctx.master_addr:master_port`` (torchrun's, or rank 0's as with ``env://``)."""
    from torch.distributed.rendezvous import _create_c10d_store

    store = _create_c10d_store(ctx.master_addr, ctx.master_port, ctx.rank, ctx.world_size,
                               kwargs["timeout"])
    ident = incarnation.ensure(ctx, store)
    log.info("pyg_dist: rank %d joins incarnation %s (torchrun restart %d)", ctx.rank,
             ident, ctx.restart_count)
    dist.init_process_group(backend, store=dist.PrefixStore(
        "torch", incarnation.scoped(store, ident)), rank=ctx.rank,
        world_size=ctx.world_size, **kwargs)
