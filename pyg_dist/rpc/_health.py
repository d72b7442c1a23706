"""Liveness of the ranks of a job: heartbeats in the rendezvous store, and a watchdog.

Every rank that joins a pyg_dist job (:func:`pyg_dist.init_process_group` or the RPC
join) starts a daemon thread that bumps its counter ``health/<rank>`` in torchrun's
store (among the keys of its incarnation, :mod:`pyg_dist.rpc._incarnation`, so a rank
restarted by torchrun never reads the dead incarnation's) every ``interval`` seconds
and reads its peers' counters. A peer
whose counter stops moving is *silent*: stopped (``SIGSTOP``), hung with the GIL
held, dead, or cut off. A rank that leaves normally writes ``done``; a rank that
fails writes its error, so peers can say why it went away.

What the watchdog does with a silent peer:

- after ``warn_after`` seconds it logs one line naming the rank;
- every pyg_dist error about a peer (RPC failures, failed collectives) and every
  uncaught exception (through ``sys.excepthook``) adds :func:`diagnose`'s line, so
  the message names the rank that did not answer. A peer that was silent for
  ``warn_after`` seconds or more and came back within the last ``recall`` seconds
  (a stop that ended just before a collective timed out) is still named, with how
  long it was silent; the failure a rank reports to its peers carries the line too,
  so the stalled rank, resumed, reads who waited on it instead of only "rank 0
  failed";
- after ``abort_after`` seconds it ends this process with exit code 1 and a
  message naming the rank (like NCCL's watchdog), so a collective left with a long
  timeout (torch's default is 30 minutes) cannot keep the job waiting.
  ``abort_after`` is twice the job's timeout, at least 60 s
  (``PYG_DIST_WATCHDOG_MIN_ABORT``: :meth:`WatchdogConfig.for_timeout` says what that
  floor protects). ``PYG_DIST_WATCHDOG=warn`` keeps only the warnings.

The store itself can go too: torchrun's agent hosts it, and an agent killed (or its
machine lost) leaves its trainers orphaned: nothing can restart them or tell them a
peer failed. After a heartbeat that cannot reach the store, the watchdog checks
whether anything still listens at the store's address; once nothing has for
``store_lost_after`` (half of ``abort_after``, so the bound holds even when a store
call hangs for the whole timeout) the process ends with exit code 1 and a message
saying the store and the agent hosting it were lost.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Dict, List, Optional, Tuple

import torch.distributed as dist

from pyg_dist.rpc import _incarnation as incarnation
from pyg_dist.rpc._context import DistContext

log = logging.getLogger("pyg_dist")

PREFIX = "health"
DONE = "done"


@dataclass
class _Peer:
    """What this rank last saw of one peer."""
    count: int = -1
    changed: float = field(default_factory=time.monotonic)
    warned: bool = False
    gap: float = 0.0  # the last silence of warn_after or more: its length ...
    gap_end: float = float("-inf")  # ... and when it ended


@dataclass(frozen=True)
class WatchdogConfig:
    """Timings of the heartbeat and of the watchdog (seconds).

    Args:
        interval: between heartbeats.
        warn_after: silence before a peer is reported as silent.
        abort_after: silence before this process gives up on the job (``None``: never).
            A store that does not answer for half of it ends the process too.
        recall: how long a silence that ended is still named by :func:`diagnose`
            (the collectives' timeout: a peer back from a stall may still have made
            one time out).
    """
    interval: float
    warn_after: float
    abort_after: Optional[float]
    recall: float = 0.0

    @property
    def store_lost_after(self) -> Optional[float]:
        """Seconds without an answer from the store before this process gives up."""
        return None if self.abort_after is None else self.abort_after / 2

    @classmethod
    def for_timeout(cls, timeout: float, min_abort: Optional[float] = None
                    ) -> "WatchdogConfig":
        """The timings for a job whose timeout is ``timeout`` seconds.

        A peer silent for ``abort_after = max(2 * timeout, min_abort)`` seconds ends this
        process (``None`` with ``PYG_DIST_WATCHDOG=warn``). The floor ``min_abort``
        (default :data:`DEFAULT_MIN_ABORT_S`, 60 s; ``PYG_DIST_WATCHDOG_MIN_ABORT``
        overrides it) keeps a short timeout from making that irreversible exit fire on
        a rank that is alive but cannot heartbeat for a while: a long call holding the
        GIL (numba compiling a kernel, unpickling a large message), a machine swapping,
        a store slow to answer. A short timeout still bounds every wait and names the
        silent rank (:func:`diagnose`); the exit is only the backstop for waits nothing
        else bounds (a collective left with torch's 30-minute default), so a late one
        costs little. Lower it only where no rank stalls that long.

        Args:
            timeout (float): the job's timeout (``DistContext.rpc_timeout``).
            min_abort (float, optional): the floor of ``abort_after`` in seconds
                (default: ``PYG_DIST_WATCHDOG_MIN_ABORT`` or 60).
        """
        interval = min(max(timeout / 20, 0.25), 5.0)
        floor = min_abort_from_env() if min_abort is None else min_abort
        abort = None if os.environ.get("PYG_DIST_WATCHDOG", "") == "warn" else \
            max(2 * timeout, floor)
        return cls(interval, max(timeout / 4, 5 * interval), abort, timeout + 2 * interval)


#: the least silence (seconds) of a peer before a rank gives up on it, whatever the timeout
DEFAULT_MIN_ABORT_S = 60.0
MIN_ABORT_ENV = "PYG_DIST_WATCHDOG_MIN_ABORT"


def min_abort_from_env() -> float:
    """``PYG_DIST_WATCHDOG_MIN_ABORT`` (seconds, at least 0), or
    :data:`DEFAULT_MIN_ABORT_S` when unset or empty."""
    raw = os.environ.get(MIN_ABORT_ENV, "").strip()
    if not raw:
        return DEFAULT_MIN_ABORT_S
    try:
        value = float(raw)
        if not 0 <= value < float("inf"):
            raise ValueError
    except ValueError:
        raise ValueError(f"{MIN_ABORT_ENV}={raw!r}: expected seconds, a finite number of at "
                         f"least 0 (default {DEFAULT_MIN_ABORT_S:.0f})") from None
    return value


class Watchdog:
    """Publishes this rank's heartbeat and watches every peer's.

    Args:
        store: a client of the job's rendezvous store, scoped to this incarnation
            (used by this thread only).
        rank (int): this process's rank.
        world_size (int): ranks in the job.
        config (WatchdogConfig): timings.
        address (str): where the store listens (for messages).
    """

    def __init__(self, store: dist.Store, rank: int, world_size: int,
                 config: WatchdogConfig, address: str = "") -> None:
        self.store = dist.PrefixStore(PREFIX, store)
        self.rank, self.world_size, self.config = rank, world_size, config
        self.address = address
        self.answered = time.monotonic()  # when the store last answered
        self.peers: Dict[int, _Peer] = {r: _Peer() for r in range(world_size) if r != rank}
        self.states: Dict[int, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.store.add(str(rank), 1)
        self._thread = threading.Thread(target=self._run, name="pyg_dist-watchdog",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failure: Optional[BaseException] = None
        while not self._stop.wait(self.config.interval):
            if failure is None:
                try:
                    self.store.add(str(self.rank), 1)
                    self.answered = time.monotonic()
                    self._observe()
                    continue
                except Exception as exc:  # the store is unreachable
                    if self._stop.is_set():  # this rank is leaving anyway
                        return
                    failure = exc
                    log.warning("pyg_dist: %s; this rank stops if nothing listens there "
                                "for %ss", self._store_problem(exc, lost=False),
                                self.config.store_lost_after)
            # torch's client does not reconnect (and logs a trace per failed call):
            # from now on only whether anything still listens at the address counts
            if _listening(self.address, self.config.interval):
                self.answered = time.monotonic()
            limit = self.config.store_lost_after
            if limit is not None and time.monotonic() - self.answered > limit:
                self._store_lost(failure)

    def _store_problem(self, exc: BaseException, lost: bool = True) -> str:
        first = str(exc).splitlines()[0] if str(exc) else ""
        quiet = time.monotonic() - self.answered
        return (f"the job's rendezvous store{' at ' + self.address if self.address else ''} "
                f"has not answered for {quiet:.0f}s ({type(exc).__name__}: {first[:200]}): "
                f"the torchrun agent hosting it (or its machine) {'was' if lost else 'may be'}"
                f" lost")

    def _store_lost(self, exc: BaseException) -> None:
        _abort(f"{self._store_problem(exc)}, so this rank is orphaned: nothing can restart "
               f"it or report its peers' failures. It stops (exit 1) instead of training "
               f"on (PYG_DIST_WATCHDOG=warn only warns)")

    def _observe(self) -> None:
        keys = [str(r) for r in self.peers]
        counts = [int(v) for v in self.store.multi_get(keys)] if self.store.check(keys) \
            else [self.store.add(k, 0) for k in keys]
        now = time.monotonic()
        with self._lock:
            for (rank, peer), count in zip(self.peers.items(), counts):
                if count != peer.count:
                    if peer.count >= 0 and now - peer.changed >= self.config.warn_after:
                        peer.gap, peer.gap_end = now - peer.changed, now
                    peer.count, peer.changed, peer.warned = count, now, False
        for rank in self.silent(self.config.warn_after):
            if not self.peers[rank].warned:
                self.peers[rank].warned = True
                log.warning("pyg_dist: %s", self.describe(rank))
        abort = self.config.abort_after
        lost = self.silent(abort) if abort is not None else []
        if lost:
            self._give_up(lost)

    def state(self, rank: int) -> str:
        """``done``, the error a rank reported, or ``""`` (still running)."""
        if rank not in self.states and self.store is not None:
            key = f"{rank}/state"
            try:
                if self.store.check([key]):
                    self.states[rank] = self.store.get(key).decode(errors="replace")
            except Exception:  # the store is gone: nothing more to learn
                return ""
        return self.states.get(rank, "")

    def silent(self, seconds: float) -> List[int]:
        """Peers whose heartbeat has not moved for ``seconds`` and that did not leave."""
        now = time.monotonic()
        with self._lock:
            quiet = [r for r, p in self.peers.items() if now - p.changed > seconds]
        return [r for r in quiet if self.state(r) != DONE]

    def recently_silent(self) -> List[int]:
        """Peers heard again after a silence of ``warn_after`` seconds or more that ended
        within the last ``recall`` seconds."""
        now = time.monotonic()
        with self._lock:
            back = [r for r, p in self.peers.items() if now - p.gap_end <= self.config.recall]
        return [r for r in back if self.state(r) != DONE]

    def describe(self, rank: int) -> str:
        peer = self.peers[rank]
        now = time.monotonic()
        quiet = now - peer.changed
        state = self.state(rank)
        if state and state != DONE:
            return f"rank {rank} failed: {state}"
        if quiet < 3 * self.config.interval and now - peer.gap_end <= self.config.recall:
            return (f"rank {rank} sent no heartbeat for {peer.gap:.0f}s until "
                    f"{now - peer.gap_end:.0f}s ago: it was stopped, hung or unreachable")
        return (f"rank {rank} has sent no heartbeat for {quiet:.0f}s: it is stopped, hung, "
                f"dead or unreachable")

    def _give_up(self, lost: List[int]) -> None:
        why = "; ".join(self.describe(r) for r in lost)
        try:
            self.store.set(f"{self.rank}/state", f"gave up waiting: {why}"[:2000])
        finally:
            _abort(f"{why}. This rank stops (exit 1) instead of waiting on it "
                   f"(PYG_DIST_WATCHDOG=warn only warns)")

    def leave(self, state: str) -> None:
        """Tells the peers this rank is leaving (``done``, or its error)."""
        self._stop.set()
        self._thread.join(timeout=2 * self.config.interval + 1)
        try:
            self.store.set(f"{self.rank}/state", state[:2000])
        except Exception:  # the store is gone already: the peers know
            pass
        if not self._thread.is_alive():  # close the connection now, not at exit
            self.store = None  # type: ignore[assignment]


_WATCHDOG: Optional[Watchdog] = None
_START_LOCK = threading.Lock()


def start(ctx: DistContext, address: Optional[Tuple[str, int]] = None) -> Optional[Watchdog]:
    """Starts this process's heartbeat and watchdog once (no-op in a 1-rank job).

    Args:
        ctx: this process.
        address: host and port of the job's store (default: ``ctx``'s master).
    """
    global _WATCHDOG
    with _START_LOCK:
        if _WATCHDOG is not None or not ctx.is_distributed:
            return _WATCHDOG
        host, port = address or (ctx.master_addr, ctx.master_port)
        store = incarnation.scoped(dist.TCPStore(host, port, is_master=False,
                                                 timeout=timedelta(seconds=ctx.rpc_timeout)),
                                   incarnation.current(ctx))
        _WATCHDOG = Watchdog(store, ctx.rank, ctx.world_size,
                             WatchdogConfig.for_timeout(ctx.rpc_timeout), f"{host}:{port}")
        _install_hooks()
    return _WATCHDOG


def running() -> Optional[Watchdog]:
    """This process's watchdog, or None when none was started (a 1-rank job)."""
    return _WATCHDOG


def diagnose(ranks: Optional[List[int]] = None) -> str:
    """One line on the peers (of ``ranks``, default all) that failed or went silent;
    ``""`` when none did or no watchdog runs."""
    dog = _WATCHDOG
    if dog is None:
        return ""
    wanted = dog.peers if ranks is None else [r for r in ranks if r in dog.peers]
    failed = [r for r in wanted if dog.state(r) not in ("", DONE)]
    quiet = [r for r in dog.silent(3 * dog.config.interval) + dog.recently_silent()
             if r in wanted and r not in failed]
    return "; ".join(dog.describe(r) for r in failed + list(dict.fromkeys(quiet)))


def with_diagnosis(message: str, ranks: Optional[List[int]] = None) -> str:
    """``message`` followed by :func:`diagnose`'s line, when there is one."""
    line = diagnose(ranks)
    return f"{message} [pyg_dist health: {line}]" if line else message


def report_failure(exc: BaseException) -> None:
    """Tells the peers this rank failed with ``exc`` (call before exiting on an error)."""
    if _WATCHDOG is not None:
        what = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) \
            else type(exc).__name__
        line = diagnose()
        _WATCHDOG.leave(f"{what} [{line}]" if line and line not in what else what)


def report_done() -> None:
    if _WATCHDOG is not None:
        _WATCHDOG.leave(DONE)


_HOOKS = {"installed": False, "failing": False}


def failing() -> bool:
    """Whether this process is exiting on an uncaught exception."""
    return _HOOKS["failing"]


def _install_hooks() -> None:
    if _HOOKS["installed"]:
        return
    _HOOKS["installed"] = True
    previous = sys.excepthook

    def hook(kind: Any, value: BaseException, tb: Any) -> None:
        _HOOKS["failing"] = True
        previous(kind, value, tb)
        line = diagnose()
        if line:
            print(f"pyg_dist: {line}", file=sys.stderr, flush=True)
        report_failure(value)

    sys.excepthook = hook
    import atexit
    atexit.register(lambda: None if _HOOKS["failing"] else report_done())


def _listening(address: str, timeout: float) -> bool:
    """Whether something accepts connections at ``host:port``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return True  # unknown address: cannot tell, assume so
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _abort(message: str) -> None:
    where = f"{socket.gethostname()} pid {os.getpid()}"
    print(f"pyg_dist watchdog ({where}, rank {_WATCHDOG.rank if _WATCHDOG else '?'}): "
          f"{message}", file=sys.stderr, flush=True)
    traceback.print_stack(sys._current_frames().get(threading.main_thread().ident),
                          file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)
