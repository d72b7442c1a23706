"""Loader options of ``torch_geometric.distributed``, accepted so its scripts run after an
import change.

Each is honoured where pyg_dist has the same knob, or accepted as a no-op with the
reason logged once (at INFO) and documented here. Any other unknown name still raises
``TypeError``.
"""
from __future__ import annotations

import logging
from typing import Any, Dict


from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._meeting import rendezvous_context  # noqa: F401  (the loaders' use)

log = logging.getLogger("pyg_dist")

#: option -> what it means in pyg_dist
PYG_LOADER_OPTIONS: Dict[str, str] = {
    "master_addr": "the rendezvous host when no process group exists yet (pyg_dist then "
                   "creates it there); no effect once there is one (RPC meets through "
                   "the process group's store)",
    "master_port": "the rendezvous port when no process group exists yet; no effect once "
                   "there is one",
    "channel": "no effect: batches come back through the loader's own queues",
    "async_sampling": "no effect: sampling is always asynchronous (an asyncio loop in the "
                      "trainer, or sampler worker processes)",
    "persistent_workers": "no effect: sampler workers live as long as their loader",
    "filter_per_worker": "no effect: batches are collated where they are sampled (in the "
                         "worker processes when num_workers > 0)",
    "num_rpc_threads": "TensorPipe threads per process; honoured when given before the "
                       "process joins RPC (its first loader)",
    "dist_sampler": "only None: pass a sampler built by the caller as neighbor_sampler= "
                    "(PyG's NeighborLoader keyword)",
}
_SAID: set = set()


def accept_pyg_options(options: Dict[str, Any], what: str) -> None:
    """Checks ``options`` (keyword arguments no pyg_dist loader parameter took).

    Raises:
        TypeError: for names ``torch_geometric.distributed`` did not have either.
        NotImplementedError: for a ``dist_sampler`` given.
    """
    unknown = sorted(set(options) - set(PYG_LOADER_OPTIONS))
    if unknown:
        raise TypeError(f"{what}() got an unexpected keyword argument '{unknown[0]}'"
                        + (f" (and {unknown[1:]})" if len(unknown) > 1 else ""))
    if options.get("dist_sampler") is not None:
        raise NotImplementedError(f"{what}: dist_sampler= is not supported; pass a "
                                  f"DistNeighborSampler as neighbor_sampler= (PyG's keyword)")
    threads = options.get("num_rpc_threads")
    if threads is not None:
        runtime.set_rpc_threads(int(threads))
    for name in options:
        if name not in _SAID:
            _SAID.add(name)
            log.info("pyg_dist: loader option %s (from torch_geometric.distributed): %s",
                     name, PYG_LOADER_OPTIONS[name])
