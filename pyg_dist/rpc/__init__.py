"""RPC runtime: context, rendezvous through torchrun's store, callees by name, asyncio
bridge, cross-rank agreement and health (heartbeats naming a stalled or failed rank)."""
from pyg_dist.rpc._agreement import DisagreementError, PeerFailedError, agree
from pyg_dist.rpc._context import DistContext
from pyg_dist.rpc._event_loop import (ConcurrentEventLoop, EventLoopThread, gather_all,
                                     wrap_future)
from pyg_dist.rpc._registry import RpcRemoteError, callee
from pyg_dist.rpc._process_group import init_process_group
from pyg_dist.rpc._runtime import (RpcGroup, RpcPeerError, current, is_initialized, join_rpc,
                                  served, shutdown_rpc)

__all__ = ["DistContext", "ConcurrentEventLoop", "EventLoopThread", "gather_all", "wrap_future",
           "callee", "RpcGroup", "RpcPeerError", "RpcRemoteError", "DisagreementError", "PeerFailedError", "agree",
           "current", "init_process_group", "join_rpc", "is_initialized", "served",
           "shutdown_rpc"]
