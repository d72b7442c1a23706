"""Joining ``torch.distributed.rpc`` through torchrun's rendezvous, routing and calling.

RPC meets through the store torchrun already runs at ``MASTER_ADDR:MASTER_PORT``
(a ``PrefixStore`` per group), so users give no extra ports or host lists. Sampler
worker processes form groups of their own over the same store.

One process belongs to at most one RPC group at a time (a torch limitation): the
trainers' group, or one sampler-worker group.
"""
from __future__ import annotations

import atexit
import itertools
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Dict, Iterator, Optional
from urllib.parse import parse_qs, urlparse

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from pyg_dist.rpc.context import DistContext
from pyg_dist.rpc.event_loop import EventLoopThread, wrap_future
from pyg_dist.rpc.registry import dispatch

_SCHEME = "pygdist"
_LOCK = threading.Lock()


class RpcPeerError(RuntimeError):
    """An RPC to a peer failed (it died, timed out, or is unreachable)."""


def _base_store(ctx: DistContext) -> dist.Store:
    """The job's rendezvous store: the default process group's, or a client of torchrun's."""
    if dist.is_initialized():
        return dist.distributed_c10d._get_default_store()
    return dist.TCPStore(ctx.master_addr, ctx.master_port, is_master=False,
                         timeout=timedelta(seconds=ctx.rpc_timeout))


_PENDING: Dict[str, DistContext] = {}


def _rendezvous(url: str, **kwargs: Any) -> Iterator:
    parsed = urlparse(url)
    query = parse_qs(parsed.query)
    group = parsed.netloc + parsed.path
    store = dist.PrefixStore(f"pyg_dist/{group}/", _base_store(_PENDING[group]))
    yield store, int(query["rank"][0]), int(query["world_size"][0])


_HOOKS = {"scheme": False, "atexit": False}


def _register_hooks() -> None:
    """Registers the rendezvous scheme and the exit hook, once per process."""
    with _LOCK:
        if not _HOOKS["scheme"]:
            dist.register_rendezvous_handler(_SCHEME, _rendezvous)
            _HOOKS["scheme"] = True
        if not _HOOKS["atexit"]:
            atexit.register(_at_exit)
            _HOOKS["atexit"] = True


@dataclass
class RpcGroup:
    """This process's RPC membership: who the peers are and which partition each serves.

    Args:
        ctx (DistContext): job context of this process.
        name (str): group name (``trainers`` or a sampler worker group).
        num_parts (int): partitions of the graph being served.
        loop (EventLoopThread): the loop awaiting this group's futures.
    """
    ctx: DistContext
    name: str
    num_parts: int
    loop: EventLoopThread
    served: Dict[str, Any] = field(default_factory=dict)
    cpu_group: Optional[Any] = None
    _cursor: Dict[int, Iterator[int]] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.ctx.rank

    @property
    def world_size(self) -> int:
        return self.ctx.world_size

    @property
    def part(self) -> int:
        return self.ctx.partition_id(self.num_parts)

    def worker_name(self, rank: int) -> str:
        return f"{self.name}-{rank}"

    def describe(self, rank: int) -> str:
        return (f"worker {self.worker_name(rank)} (rank {rank}, partition "
                f"{self.ctx.partition_of(rank, self.num_parts)})")

    def route(self, part: int) -> int:
        """A rank serving ``part``, spreading requests over its trainers (round robin)."""
        if part == self.part:
            return self.rank
        if part not in self._cursor:
            ranks = self.ctx.ranks_of(part, self.num_parts)
            start = self.rank % len(ranks)
            self._cursor[part] = itertools.cycle(ranks[start:] + ranks[:start])
        return next(self._cursor[part])

    def call_async(self, rank: int, callee: str, *args: Any) -> "Any":
        """Calls ``callee(*args)`` on ``rank``; returns an asyncio future of the loop.

        Errors reach the waiter naming the peer; a callee's own exception keeps its
        type and message.
        """
        if rank == self.rank:
            fut: torch.futures.Future = torch.futures.Future()
            try:
                fut.set_result(dispatch(callee, *args))
            except Exception as exc:  # delivered through the future
                fut.set_exception(exc)
        else:
            fut = rpc.rpc_async(self.worker_name(rank), dispatch, args=(callee, *args),
                                timeout=self.ctx.rpc_timeout)
        return wrap_future(fut, self.loop.loop, lambda e: _name_peer(e, self, rank, callee))

    def call(self, rank: int, callee: str, *args: Any) -> Any:
        """Blocking form of :meth:`call_async` (do not use from the loop thread)."""
        async def _await() -> Any:
            return await self.call_async(rank, callee, *args)
        return self.loop.run(_await(), timeout=self.ctx.rpc_timeout + 5)


_PASSTHROUGH = (ValueError, KeyError, TypeError, IndexError, NotImplementedError)


def _name_peer(exc: BaseException, group: RpcGroup, rank: int, callee: str) -> BaseException:
    where = f"pyg_dist RPC '{callee}' on {group.describe(rank)}"
    if isinstance(exc, _PASSTHROUGH):
        try:
            named = type(exc)(f"{where} raised: {exc}")
            named.__cause__ = exc
            return named
        except TypeError:
            pass
    named = RpcPeerError(f"{where} failed (the peer died, timed out after "
                         f"{group.ctx.rpc_timeout:.0f}s, or is unreachable): {exc}")
    named.__cause__ = exc
    return named


_GROUP: Optional[RpcGroup] = None
_INITS = itertools.count()


def init_rpc(ctx: DistContext, num_parts: int, served: Optional[Dict[str, Any]] = None,
             group: str = "trainers") -> RpcGroup:
    """Joins (collectively) the RPC group ``group`` of ``ctx.world_size`` processes.

    Every rank must call it. With ``world_size == 1`` no RPC agent is started: all
    calls run in-process. ``served`` are the objects this process serves to peers
    (e.g. ``{"graph": graph_store, "feature": feature_store}``).
    """
    global _GROUP
    with _LOCK:
        if _GROUP is not None:
            raise RuntimeError(f"this process already joined RPC group '{_GROUP.name}'; "
                               f"call shutdown_rpc() first")
        ctx.partition_id(num_parts)  # validates world_size vs num_parts
        name = f"{group}{next(_INITS)}"
        state = RpcGroup(ctx, name, num_parts, EventLoopThread(f"pyg_dist-{name}"),
                         dict(served or {}))
        _GROUP = state
    if ctx.is_distributed:
        _join(state, collectives=(group == "trainers"))
    return state


def ensure_process_group(ctx: DistContext) -> Optional[Any]:
    """Initialises the default process group (gloo) if user code did not, and returns a
    gloo group for pyg_dist's CPU collectives (``None`` = the default group)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="env://", rank=ctx.rank,
                                world_size=ctx.world_size,
                                timeout=timedelta(seconds=max(ctx.rpc_timeout, 60)))
    if dist.get_backend() == "gloo":
        return None
    return dist.new_group(backend="gloo")


def _join(state: RpcGroup, collectives: bool) -> None:
    _register_hooks()
    if collectives:
        state.cpu_group = ensure_process_group(state.ctx)
    _PENDING[state.name] = state.ctx
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"{_SCHEME}://{state.name}", rpc_timeout=state.ctx.rpc_timeout,
        num_worker_threads=16)
    try:
        rpc.init_rpc(state.worker_name(state.rank), rank=state.rank,
                     world_size=state.world_size, rpc_backend_options=options)
    except BaseException:
        _drop_group()
        raise
    finally:
        _PENDING.pop(state.name, None)


def _drop_group() -> None:
    global _GROUP
    with _LOCK:
        if _GROUP is not None:
            _GROUP.loop.close()
        _GROUP = None


def current() -> RpcGroup:
    """The group this process joined. Raises if it joined none."""
    if _GROUP is None:
        raise RuntimeError("pyg_dist RPC is not initialised in this process: create a loader "
                           "or call pyg_dist.init_rpc(ctx, ...) first")
    return _GROUP


def is_initialized() -> bool:
    return _GROUP is not None


def served(name: str) -> Any:
    """An object this process serves to its peers (used inside callees)."""
    obj = current().served.get(name)
    if obj is None:
        raise KeyError(f"this pyg_dist worker serves no '{name}' "
                       f"(serving: {sorted(current().served)})")
    return obj


def shutdown_rpc(graceful: bool = True) -> None:
    """Leaves the RPC group. ``graceful`` waits (up to the RPC timeout) until every
    peer has also called it, so a rank that finishes early keeps serving the others."""
    state = _GROUP
    if state is None:
        return
    try:
        if state.ctx.is_distributed:
            rpc.shutdown(graceful=graceful, timeout=state.ctx.rpc_timeout)
    finally:
        _drop_group()


def _at_exit() -> None:
    if _GROUP is not None:
        shutdown_rpc(graceful=True)

