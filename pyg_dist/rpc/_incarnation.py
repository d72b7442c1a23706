"""Which incarnation of a job this process belongs to, agreed through the job's store.

Under ``torchrun --max-restarts=N`` a failed round of workers is replaced by a new one:
fresh processes, same rendezvous store (torchrun keeps its TCPStore across rounds, with
static and with c10d rendezvous alike), so every key the dead round wrote is still
there: RPC addresses, gloo's addresses, heartbeats, group counters. Reading any of them
connects to a dead process or waits for one. pyg_dist therefore keeps every key of a
job under ``pyg_dist/<incarnation>/`` (:func:`scoped`), torch's own process group
included (:func:`pyg_dist.init_process_group`).

``TORCHELASTIC_RESTART_COUNT`` cannot serve as that id: it counts the restarts of one
machine's agent, and with c10d rendezvous a machine whose workers are restarted because
another machine lost one does not count it. Instead rank 0 draws a random id and hands
it to every rank through a handshake that no key left by a dead round can fool:

1. rank 0 writes ``leader = id``;
2. every other rank writes its own random nonce to ``<leader>/ack/<rank>`` and waits for
   ``welcome/<nonce>``; when ``leader`` changes meanwhile (it had read a dead round's),
   it acknowledges the new one;
3. once every rank acknowledged under its (new, so never stale) id, rank 0 writes
   ``welcome/<nonce>`` = id for each of them.

Sampler worker processes do not take part: they inherit their trainer's incarnation
through :class:`~pyg_dist.rpc._context.DistContext`.
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Dict, List

import torch.distributed as dist

from pyg_dist.errors import PygDistError
from pyg_dist.rpc._context import DistContext

_ROOT = "pyg_dist/incarnation"
_POLL_S = (0.01, 0.2)  # first and longest pause between looks at the store
_AGREED: Dict[str, str] = {}
_LOCK = threading.Lock()


class IncarnationError(RuntimeError, PygDistError):
    """The ranks of a (re)started job could not agree on their incarnation in time."""


def agree_incarnation(store: dist.Store, rank: int, world_size: int, timeout: float,
          restart_count: int = 0) -> str:
    """Agrees (collectively) on a fresh id for the incarnation of the job's ranks.

    Args:
        store: the job's rendezvous store, unscoped (shared with earlier incarnations).
        rank (int): this process's rank.
        world_size (int): ranks taking part.
        timeout (float): seconds to wait for the other ranks.
        restart_count (int): rank 0's ``TORCHELASTIC_RESTART_COUNT``, kept in the id for
            logs.

    Raises:
        IncarnationError: naming the ranks that did not take part within ``timeout``.
    """
    store = dist.PrefixStore(_ROOT, store)
    deadline = time.monotonic() + timeout
    if rank == 0:
        ident = f"{restart_count}-{uuid.uuid4().hex[:16]}"
        store.set("leader", ident)
        acks = [f"{ident}/ack/{r}" for r in range(1, world_size)]
        _poll(lambda: store.check(acks), deadline, lambda: IncarnationError(
            f"pyg_dist: rank(s) {_missing(store, acks)} of {world_size} did not join "
            f"incarnation {ident} of the job within {timeout:.0f}s: they did not start, "
            f"died while starting, or run a different world size"))
        for key in acks:
            store.set(f"welcome/{store.get(key).decode()}", ident)
        return ident
    nonce, acked = uuid.uuid4().hex, None
    welcome = f"welcome/{nonce}"

    def welcomed() -> bool:
        nonlocal acked
        if store.check(["leader"]):
            leader = store.get("leader").decode()
            if leader != acked:  # a new rank 0 (or the first we see): acknowledge it
                store.set(f"{leader}/ack/{rank}", nonce)
                acked = leader
        return store.check([welcome])

    _poll(welcomed, deadline, lambda: IncarnationError(
        f"pyg_dist: rank {rank} was not welcomed by rank 0 of its incarnation within "
        f"{timeout:.0f}s (last leader seen: {acked}): rank 0 did not start, died while "
        f"starting, or waits for other ranks"))
    return store.get(welcome).decode()


def _poll(done, deadline: float, error) -> None:
    pause = _POLL_S[0]
    while not done():
        if time.monotonic() > deadline:
            raise error()
        time.sleep(pause)
        pause = min(2 * pause, _POLL_S[1])


def _missing(store: dist.Store, keys: List[str]) -> List[int]:
    return [int(k.rsplit("/", 1)[1]) for k in keys if not store.check([k])]


def ensure(ctx: DistContext, store: dist.Store) -> str:
    """The incarnation of this process: ``ctx.incarnation`` when set (sampler workers),
    else the one its ranks agreed, agreeing (collectively) the first time."""
    if ctx.incarnation is not None:
        return ctx.incarnation
    if not ctx.is_distributed:
        return "solo"
    with _LOCK:
        if "id" not in _AGREED:
            _AGREED["id"] = agree_incarnation(store, ctx.rank, ctx.world_size, ctx.rpc_timeout,
                                  ctx.restart_count)
        return _AGREED["id"]


def current(ctx: DistContext) -> str:
    """This process's incarnation, already agreed (see :func:`ensure`).

    Raises:
        RuntimeError: when the ranks have not agreed on it yet.
    """
    if ctx.incarnation is not None:
        return ctx.incarnation
    if not ctx.is_distributed:
        return "solo"
    if "id" not in _AGREED:
        raise RuntimeError("pyg_dist: this job's incarnation is not agreed yet: call "
                           "pyg_dist.init_process_group(backend, ctx) first")
    return _AGREED["id"]


def scoped(store: dist.Store, incarnation: str) -> dist.Store:
    """``store`` seen through the keys of ``incarnation`` only."""
    return dist.PrefixStore(f"pyg_dist/{incarnation}", store)

