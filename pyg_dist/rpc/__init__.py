"""RPC runtime: context, rendezvous through torchrun's store, callees by name, asyncio bridge."""
from pyg_dist.rpc.context import DistContext
from pyg_dist.rpc.event_loop import EventLoopThread, wrap_future
from pyg_dist.rpc.registry import callee
from pyg_dist.rpc.runtime import (RpcGroup, RpcPeerError, current, init_rpc, is_initialized,
                                  served, shutdown_rpc)

__all__ = ["DistContext", "EventLoopThread", "wrap_future", "callee", "RpcGroup",
           "RpcPeerError", "current", "init_rpc", "is_initialized", "served", "shutdown_rpc"]
