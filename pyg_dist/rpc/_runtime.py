"""Joining ``torch.distributed.rpc`` through torchrun's rendezvous, routing and calling.

RPC meets through the store torchrun already runs at ``MASTER_ADDR:MASTER_PORT``
(a ``PrefixStore`` per group), so users give no extra ports or host lists. Sampler
worker processes form groups of their own over the same store. torchrun keeps that
store when it restarts the workers (``--max-restarts``), so every key pyg_dist uses,
torch's process group included, lives under the id the ranks of this incarnation
agreed on (:mod:`pyg_dist.rpc._incarnation`): nothing a dead incarnation left is read.

One process belongs to at most one RPC group at a time (a torch limitation): the
trainers' group, or one sampler-worker group. Group names are never taken from a
per-process counter: the trainers' group is numbered through the store (every rank
reads the same number), worker groups are named after their trainers' group and the
loader number every rank agreed on.

Every wait is bounded by the job's timeout (``DistContext.rpc_timeout``): RPCs, and
pyg_dist's own collectives, which run on a gloo group of their own created with that
timeout (:mod:`pyg_dist.rpc._process_group`). Errors about a peer name it, and add what
the health watchdog knows of it (:mod:`pyg_dist.rpc._health`).
"""
from __future__ import annotations

import atexit
import contextvars
import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, Optional
from urllib.parse import parse_qs, urlparse

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from pyg_dist.errors import PygDistError
from pyg_dist.rpc import _health as health, _network as network, _stores as stores
from pyg_dist.rpc._agreement import agree
from pyg_dist.rpc._context import DistContext
from pyg_dist.rpc._event_loop import EventLoopThread, wrap_future
from pyg_dist.rpc._process_group import ensure_process_group
from pyg_dist.rpc._registry import RemoteFailure, dispatch, run_local
from pyg_dist.rpc._stores import store_address

log = logging.getLogger("pyg_dist")

_SCHEME = "pygdist"
_LOCK = threading.Lock()
_SERVING: contextvars.ContextVar = contextvars.ContextVar("pyg_dist_serving", default=None)


class RpcPeerError(RuntimeError, PygDistError):
    """An RPC to a peer failed (it died, timed out, or is unreachable)."""


_PENDING: Dict[str, DistContext] = {}


def _rendezvous(url: str, **kwargs: Any) -> Iterator:
    parsed = urlparse(url)
    query = parse_qs(parsed.query)
    group = parsed.netloc + parsed.path
    store = dist.PrefixStore(f"rpc/{group}", stores.job_store(_PENDING[group]))
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


@dataclass(eq=False)
class RpcGroup:
    """This process's RPC membership and transport: who the peers are, which partition
    each serves, and how to call them. What the layers above keep per group (the
    sampler's same-machine reads, the loaders' numbering) lives in their own objects,
    keyed by the group (it compares and hashes by identity).

    Args:
        ctx (DistContext): job context of this process.
        name (str): group name (``trainers<n>`` or a sampler worker group).
        num_parts (int): partitions of the graph being served.
        loop (EventLoopThread): the loop awaiting this group's futures.
        served (dict): the objects this process serves to its peers, by name.
        cpu_group: the gloo group of pyg_dist's collectives (trainers only).
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

        A callee's own exception keeps its type (builtin types) and message, with the
        peer named; a dead, silent or unreachable peer gives :class:`RpcPeerError`.
        """
        if rank == self.rank:
            return self.call_here(callee, args)
        fut = rpc.rpc_async(self.worker_name(rank), dispatch, args=(callee, *args),
                            timeout=self.ctx.rpc_timeout)
        where = f"pyg_dist RPC '{callee}' on {self.describe(rank)}"
        return wrap_future(fut, self.loop.loop, lambda e: _peer_error(e, self, rank, where),
                           lambda value: _unwrap(value, where))

    def call_here(self, callee: str, args: tuple,
                  serving: Optional[Dict[str, Any]] = None) -> Any:
        """Runs ``callee(*args)`` in this process; returns a completed future of the loop.

        Args:
            callee (str): a registered callee.
            args (tuple): its arguments.
            serving (dict, optional): the objects :func:`served` gives the callee instead
                of this process's own (e.g. another partition's, mapped here).
        """
        fut: torch.futures.Future = torch.futures.Future()
        token = _SERVING.set(serving)
        try:
            fut.set_result(run_local(callee, *args))
        except Exception as exc:  # delivered through the future
            fut.set_exception(exc)
        finally:
            _SERVING.reset(token)
        return wrap_future(fut, self.loop.loop)

    def call(self, rank: int, callee: str, *args: Any) -> Any:
        """Blocking form of :meth:`call_async` (do not use from the loop thread)."""
        async def _await() -> Any:
            return await self.call_async(rank, callee, *args)
        return self.loop.run(_await(), timeout=self.ctx.rpc_timeout + 5)

    def agree(self, what: str, must_match: Dict[str, Any],
              info: Optional[Dict[str, Any]] = None,
              error: Optional[BaseException] = None) -> list:
        """:func:`pyg_dist.rpc._agreement.agree` over this group's trainers."""
        return agree(what, must_match, self.world_size, self.cpu_group, info, error)


def _unwrap(value: Any, where: str) -> Any:
    if isinstance(value, RemoteFailure):
        raise value.to_exception(where)
    return value


def _peer_error(exc: BaseException, group: RpcGroup, rank: int, where: str) -> BaseException:
    message = (f"{where} failed (the peer died, timed out after {group.ctx.rpc_timeout:.0f}s, "
               f"or is unreachable): {exc}")
    named = RpcPeerError(health.with_diagnosis(message, [rank]))
    named.__cause__ = exc
    return named


_GROUP: Optional[RpcGroup] = None



def join_rpc(ctx: DistContext, num_parts: int, served: Optional[Dict[str, Any]] = None,
             group: str = "trainers", must_match: Optional[Dict[str, Any]] = None,
             error: Optional[BaseException] = None) -> RpcGroup:
    """Joins (collectively) the RPC group ``group`` of ``ctx.world_size`` processes.

    The RPC layer's join, serving given objects; :func:`pyg_dist.init_rpc` (which
    serves a partition) calls it, and so do sampler worker processes.

    Every rank must call it. With ``world_size == 1`` no RPC agent is started: all
    calls run in-process. ``served`` are the objects this process serves to peers
    (e.g. ``{"graph": graph_store, "feature": feature_store}``). For the trainers'
    group, ``must_match`` (e.g. the partitioning's identity) is compared across
    ranks before anyone joins, and a rank's own ``error`` is raised on every rank.
    What the layers above exchange about the group (e.g. who serves which files) they
    exchange with :meth:`RpcGroup.agree` once it is joined.

    Raises:
        DisagreementError: on every rank, when ranks disagree on ``must_match``.
    """
    global _GROUP
    with _LOCK:
        if _GROUP is not None:
            raise RuntimeError(f"this process already joined RPC group '{_GROUP.name}'; "
                               f"call shutdown_rpc() first")
    trainers = group == "trainers"
    cpu_group = None
    try:
        ctx.partition_id(num_parts)  # validates world_size vs num_parts
    except ValueError as exc:
        error = error or exc
    if ctx.is_distributed and trainers:
        cpu_group = ensure_process_group(ctx)
        agree(f"joining pyg_dist RPC ({group})", {"num_parts": num_parts,
                                                  **(must_match or {})},
              ctx.world_size, cpu_group, error=error)
    elif error is not None:
        raise error
    name = f"{group}{_generation(ctx, group)}" if trainers else group
    with _LOCK:
        state = RpcGroup(ctx, name, num_parts, EventLoopThread(f"pyg_dist-{name}"),
                         dict(served or {}), cpu_group)
        _GROUP = state
    if ctx.is_distributed:
        _join(state, trainers)
    return state


def _generation(ctx: DistContext, group: str) -> int:
    """How many times this job formed ``group`` before (the same on every rank: the
    k-th join of every rank draws from [k * world_size, (k + 1) * world_size))."""
    if not ctx.is_distributed:
        return 0
    count = stores.job_store(ctx).add(f"generations/{group}", 1)
    return (int(count) - 1) // ctx.world_size


_RPC_THREADS = {"n": 16}


def set_rpc_threads(num: int) -> None:
    """TensorPipe worker threads of the RPC groups this process joins from now on."""
    if num < 1:
        raise ValueError(f"num_rpc_threads must be >= 1, got {num}")
    _RPC_THREADS["n"] = num


def _join(state: RpcGroup, trainers: bool) -> None:
    _register_hooks()
    address = store_address(state.ctx)
    network.choose_interfaces(address[0])
    if trainers:  # sampler workers share their trainer's rank: never its heartbeat
        health.start(state.ctx, address)
    _PENDING[state.name] = state.ctx
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"{_SCHEME}://{state.name}", rpc_timeout=state.ctx.rpc_timeout,
        num_worker_threads=_RPC_THREADS["n"], **network.tensorpipe_options())
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
    """Whether this process has joined the job's RPC group (and not shut it down)."""
    return _GROUP is not None


def served(name: str) -> Any:
    """An object this process serves to its peers (used inside callees); inside
    :meth:`RpcGroup.call_here` with ``serving``, the object given there."""
    serving = _SERVING.get() or current().served
    obj = serving.get(name)
    if obj is None:
        raise KeyError(f"this pyg_dist worker serves no '{name}' "
                       f"(serving: {sorted(serving)})")
    return obj


def shutdown_rpc(graceful: bool = True) -> None:
    """Leaves the RPC group. ``graceful`` waits (up to the RPC timeout) until every
    peer has also called it, so a rank that finishes early keeps serving the others."""
    state = _GROUP
    if state is None:
        return
    try:
        # this process's own requests end first: a batch still being sampled (a loop
        # left early) would otherwise send new requests while RPC shuts down
        state.loop.cancel_tasks(timeout=5.0)
        if state.ctx.is_distributed:
            rpc.shutdown(graceful=graceful, timeout=state.ctx.rpc_timeout)
    finally:
        _drop_group()


def _at_exit() -> None:
    if _GROUP is not None:  # leaving on an uncaught error: do not wait on the peers
        shutdown_rpc(graceful=not health.failing())
