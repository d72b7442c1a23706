"""``torch_geometric.distributed.event_loop``'s name, for scripts that drive a sampler by
hand (``from pyg_dist.event_loop import ConcurrentEventLoop``): see
:class:`pyg_dist.rpc.ConcurrentEventLoop`. pyg_dist's loaders need none."""
from pyg_dist.rpc import ConcurrentEventLoop

__all__ = ["ConcurrentEventLoop"]
