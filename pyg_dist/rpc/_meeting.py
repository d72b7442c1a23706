"""Where ranks meet when user code made no process group: PyG's ``master_addr`` /
``master_port``, given to its loaders and to its ``init_rpc``."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict

import torch.distributed as dist

from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._context import DistContext


def rendezvous_context(ctx: DistContext, options: Dict[str, Any]) -> DistContext:
    """``ctx`` meeting at the ``master_addr`` / ``master_port`` among ``options`` when
    given and this process has no process group (nor RPC) yet, as
    ``torch_geometric.distributed``'s loaders met there; else ``ctx`` unchanged.

    Raises:
        ValueError: ``master_port`` is not a port number.
    """
    addr, port = options.get("master_addr"), options.get("master_port")
    if (addr is None and port is None) or dist.is_initialized() or runtime.is_initialized():
        return ctx
    if port is not None:
        try:
            port = int(port)
        except (TypeError, ValueError):
            port = -1
        if not 0 < port < 65536:
            raise ValueError(f"master_port must be a port number in [1, 65535], got "
                             f"{options['master_port']!r}")
    return dataclasses.replace(ctx, master_addr=ctx.master_addr if addr is None else str(addr),
                               master_port=ctx.master_port if port is None else port)
