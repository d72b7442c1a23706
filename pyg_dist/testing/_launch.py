"""Running a function on several local processes the way ``torchrun`` would.

The parent hosts the rendezvous store (like torchrun's agent) and gives every child
torchrun's environment variables. Every child's exit code is checked, a failing
child's traceback is shown, and nothing outlives the timeout.

Children are forked from a ``multiprocessing`` fork server that has imported torch,
torch_geometric and pyg_dist once and loaded pyg_dist's numba kernels
(:data:`PRELOAD`, :mod:`pyg_dist.loader._preload`): a fresh interpreter spends seconds of
CPU on those, which was most of what a multi-process test cost. The server only imports
and warms up on one thread (no process group, no thread pool), so the fork is safe;
each child still gets the parent's current environment and working directory and runs
the ``atexit`` handlers at its end, as a spawned one would (what differs: modules imported
before a variable was set have read the server's value, e.g. ``NUMBA_NUM_THREADS``, and
the preloaded modules' pages are shared with the server; ``start_method="spawn"`` gives a
fresh interpreter, and ``benchmarks/`` ask for it: their memory figures and thread
settings are per process). A forked child's sampler workers are forked by the same
server (:func:`_share_fork_server`), not by a server of the child's own as a trainer's
are.
"""
from __future__ import annotations

import atexit
import faulthandler
import multiprocessing as mp
import os
import pickle
import queue
import socket
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from pyg_dist.errors import PygDistError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RanksFailed(RuntimeError, PygDistError):
    """One or more ranks raised, died, or did not finish in time."""


@dataclass
class _Outcome:
    rank: int
    ok: bool
    value: Any = None
    error: str = ""


def torchrun_env(rank: int, world_size: int, port: int, nodes: int = 1) -> Dict[str, str]:
    """The environment torchrun gives rank ``rank`` (``nodes`` machines, equal sizes)."""
    per_node = world_size // nodes
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
            "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank % per_node),
            "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(rank // per_node),
            "TORCHELASTIC_USE_AGENT_STORE": "True", "OMP_NUM_THREADS": "1"}


#: what the fork server imports once for every child it forks (``import pyg_dist`` imports
#: its packages on first use: they are named here)
PRELOAD = ["torch", "torch.distributed", "torch_geometric", "pyg_dist", "pyg_dist.rpc",
           "pyg_dist.store", "pyg_dist.partition", "pyg_dist.sampler", "pyg_dist.loader",
           "pyg_dist.checkpoint", "pyg_dist.embedding", "pyg_dist.inference", "pyg_dist.loop",
           "pyg_dist.testing", "pyg_dist.loader._preload"]


#: seconds a rank gets to exit after its result: a forked child ends in ``os._exit`` after
#: its ``atexit`` handlers; a spawned one tears its interpreter down (a final garbage
#: collection over torch, torch_geometric and numba: 2-4 s of CPU each, measured, so three
#: at once under a load of 10 on 2 cores took 27-35 s)
EXIT_GRACE_S = {"forkserver": 30.0, "spawn": 60.0}


def process_context(start_method: str = "forkserver") -> Any:
    """A multiprocessing context: ``"forkserver"`` forks from a server that imported
    :data:`PRELOAD` once; ``"spawn"`` starts a fresh interpreter."""
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', not {start_method!r}")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _share_fork_server() -> None:
    """In a child this fork server forked: what the child starts with the ``forkserver``
    method (sampler workers) is forked by this same server, which has imported
    :data:`PRELOAD`, as the child itself was. Otherwise each child starts a server of its
    own, a fresh interpreter importing torch, torch_geometric and pyg_dist again (~8 s of
    CPU per rank of every test with sampler workers). The server's address and "alive"
    pipe are inherited; ``multiprocessing`` only launches a new server because it did not
    start this one. Workers forked so write to the same stdout and stderr as the child.
    :mod:`tests.support.scripts` does not share it (its ranks' output goes to a log,
    and a worker may need the script as ``__main__``), nor does a test calling loaders
    in its own process: both start servers of their own, as trainers do."""
    from multiprocessing import forkserver, resource_tracker

    server = forkserver._forkserver
    # another Python may keep other internals: then the child starts its own, as before
    if getattr(server, "_forkserver_address", None) is None or \
            getattr(server, "_forkserver_alive_fd", None) is None:
        return

    def ensure_running() -> None:
        resource_tracker.ensure_running()
    server.ensure_running = ensure_running  # type: ignore[method-assign]


def _child(fn: Callable[..., Any], env: Dict[str, str], args: Sequence[Any],
           results: "mp.Queue[_Outcome]", timeout: float, cwd: str = "",
           forked: bool = False) -> None:
    if forked:
        _share_fork_server()
    # the parent's environment now (a forked child would otherwise see the fork
    # server's, as it was when the server started), plus torchrun's variables
    os.environ.clear()
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    rank = int(env["RANK"])
    # every thread's stack on a crash (SIGSEGV, SIGABRT, ...), and shortly before the
    # parent gives up on us
    faulthandler.enable(all_threads=True)
    faulthandler.dump_traceback_later(max(timeout - 5, 1), exit=False)
    try:
        value = fn(*args)
    except BaseException as exc:
        from pyg_dist.rpc import _health as health

        health.report_failure(exc)  # peers waiting on this rank name it
        results.put(_Outcome(rank, False, error=traceback.format_exc()))
        results.close()
        results.join_thread()  # flush before the hard exit below
        sys.stderr.flush()
        os._exit(1)
    _leave_process_group()
    # plain pickle: tensors travel by value, not as shared-memory handles that die with us
    results.put(_Outcome(rank, True, value=pickle.dumps(value)))
    results.close()
    results.join_thread()
    if forked:  # a forked child ends in os._exit: run what the end of a script would
        atexit._run_exitfuncs()


@contextmanager
def _environ(env: Dict[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside (a spawned child starts with it), as before after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _leave_process_group() -> None:
    """Destroys the process group ``fn`` left initialised, as a training script ends."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 120.0,
              nodes: int = 1, extra_env: Optional[Dict[str, str]] = None,
              may_die: Sequence[int] = (),
              start_method: Union[str, Sequence[str]] = "forkserver",
              rank_env: Optional[Dict[int, Dict[str, Optional[str]]]] = None) -> List[Any]:
    """Runs ``fn(*args)`` in ``world_size`` new processes; returns their results by rank.

    Args:
        fn: a picklable (module-level) function; reads its rank from ``RANK``.
        world_size: number of processes.
        timeout: seconds for the whole run; then every child is killed.
        nodes: simulated machines (sets ``GROUP_RANK``/``LOCAL_RANK`` like torchrun).
        extra_env: more environment variables for the children.
        rank_env: more environment variables for some ranks only (by rank; a variable
            set to ``None`` is removed from that rank's environment).
        may_die: ranks a test kills on purpose; their result is ``None``.
        start_method: ``"forkserver"`` (children forked from a process that imported
            :data:`PRELOAD` once) or ``"spawn"`` (a fresh interpreter per child), or one
            of them per rank (a list of ``world_size``: e.g. only the rank whose fresh
            start a test is about is spawned).

    Raises:
        RanksFailed: naming each rank that raised (with its traceback), died with an
            exit code, or was still running at the timeout.
    """
    import torch.distributed as dist

    methods = [start_method] * world_size if isinstance(start_method, str) \
        else list(start_method)
    if len(methods) != world_size:
        raise ValueError(f"start_method: one per rank ({world_size}), got {len(methods)}")
    contexts = {method: process_context(method) for method in methods}
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                          timeout=timedelta(seconds=timeout), wait_for_workers=False)
    # one queue for every rank: the spawn and forkserver methods pickle it alike
    results: "mp.Queue[_Outcome]" = contexts[methods[0]].Queue()
    procs = []
    for rank, method in enumerate(methods):
        env = {**os.environ, **torchrun_env(rank, world_size, port, nodes), **(extra_env or {}),
               **(rank_env or {}).get(rank, {})}
        env = {k: v for k, v in env.items() if v is not None}
        proc = contexts[method].Process(target=_child, args=(fn, env, args, results, timeout,
                                                             os.getcwd(), method == "forkserver"),
                                        name=f"rank{rank}", daemon=False)
        with _environ(env):  # a spawned child reads it as it starts (numba's settings)
            proc.start()
        procs.append(proc)
    try:
        outcomes = _collect(procs, results, timeout, set(may_die))
        grace = max(EXIT_GRACE_S[method] for method in contexts)
        _check_exits(procs, deadline=time.monotonic() + grace, may_die=set(may_die))
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        del store
    return [None if outcomes[r].value is None else pickle.loads(outcomes[r].value)
            for r in range(world_size)]


def _collect(procs: List[Any], results: "mp.Queue[_Outcome]", timeout: float,
             may_die: set) -> Dict[int, _Outcome]:
    deadline = time.monotonic() + timeout
    outcomes: Dict[int, _Outcome] = {}
    failed_at: Optional[float] = None
    while len(outcomes) < len(procs):
        try:
            out = results.get(timeout=0.2)
            outcomes[out.rank] = out
            if not out.ok and failed_at is None:
                failed_at = time.monotonic()
        except queue.Empty:
            pass
        for rank, proc in enumerate(procs):
            if rank not in outcomes and proc.exitcode is not None and _drained(results, outcomes):
                if rank in may_die:
                    outcomes.setdefault(rank, _Outcome(rank, True))
                    continue
                outcomes.setdefault(rank, _Outcome(rank, False, error=f"exited with code "
                                                   f"{proc.exitcode} without a result"))
                failed_at = failed_at or time.monotonic()
        now = time.monotonic()
        if now > deadline or (failed_at is not None and now > failed_at + 30):
            break
    errors = [o for o in outcomes.values() if not o.ok]
    missing = [r for r in range(len(procs)) if r not in outcomes]
    if errors or missing:
        lines = [f"--- rank {o.rank} failed:\n{o.error}" for o in sorted(errors, key=lambda o: o.rank)]
        if missing:
            lines.append(f"--- rank(s) {missing} still running after "
                         f"{'the timeout' if failed_at is None else 'another rank failed'}; killed")
        raise RanksFailed("\n".join(lines))
    return outcomes


def _check_exits(procs: List[Any], deadline: float, may_die: set) -> None:
    """Every rank that reported a result must then exit with code 0: a crash while
    shutting down (or a hang) fails the run like any other error."""
    bad = []
    for rank, proc in enumerate(procs):
        proc.join(max(deadline - time.monotonic(), 0.1))
        if rank in may_die:
            continue
        if proc.exitcode is None:
            bad.append(f"--- rank {rank} returned its result but did not exit; killed")
        elif proc.exitcode != 0:
            bad.append(f"--- rank {rank} returned its result, then exited with code "
                       f"{proc.exitcode}")
    if bad:
        raise RanksFailed("\n".join(bad))


def _drained(results: "mp.Queue[_Outcome]", outcomes: Dict[int, _Outcome]) -> bool:
    """Reads results that are already queued; True once nothing more is waiting."""
    while True:
        try:
            out = results.get(timeout=0.5)
        except queue.Empty:
            return True
        outcomes[out.rank] = out
