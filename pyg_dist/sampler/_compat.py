"""``DistNeighborSampler`` arguments of ``torch_geometric.distributed``, accepted so its
scripts run after an import change.

PyG's sampler took ``(current_ctx, data, num_neighbors, ...)``; pyg_dist's takes
``(data, num_neighbors, current_ctx, ...)``. A call in PyG's positional order (a
:class:`~pyg_dist.DistContext` first) is recognised and reordered. PyG's other sampler
arguments are accepted with no effect here, each warned about once per process; any
other unknown name still raises ``TypeError``.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, Set, Tuple

from pyg_dist.rpc._context import DistContext

#: argument -> why it has no effect on pyg_dist's sampler
PYG_SAMPLER_OPTIONS: Dict[str, str] = {
    "channel": "batches go back through the loader's own queues, not a channel",
    "concurrency": "the loader's concurrency sets how many batches are in flight",
    "device": "sampling runs on the CPU; the loader's device moves batches",
    "shuffle": "the loader orders the seeds (its shuffle argument)",
    "rpc_worker_names": "RPC peers are found through the process group's store",
}
_WARNED: Set[str] = set()


def pyg_order(data: Any, num_neighbors: Any, current_ctx: Any) -> Tuple[Any, Any, Any]:
    """``(data, num_neighbors, current_ctx)``, reordered when given in PyG's order
    ``(current_ctx, data, num_neighbors)``."""
    if isinstance(data, DistContext) and not isinstance(current_ctx, DistContext):
        return num_neighbors, current_ctx, data
    return data, num_neighbors, current_ctx


def accept_pyg_sampler_options(options: Dict[str, Any]) -> None:
    """Checks keyword arguments no pyg_dist sampler parameter took.

    Raises:
        TypeError: for names ``torch_geometric.distributed``'s sampler did not have
            either.
    """
    unknown = sorted(set(options) - set(PYG_SAMPLER_OPTIONS))
    if unknown:
        raise TypeError(f"DistNeighborSampler() got an unexpected keyword argument "
                        f"'{unknown[0]}'" + (f" (and {unknown[1:]})" if len(unknown) > 1 else ""))
    for name in sorted(set(options) - _WARNED):
        _WARNED.add(name)
        warnings.warn(f"DistNeighborSampler: {name}= (from torch_geometric.distributed) has no "
                      f"effect in pyg_dist: {PYG_SAMPLER_OPTIONS[name]}", UserWarning,
                      stacklevel=3)
