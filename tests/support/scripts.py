"""Running a script on local ranks as ``torchrun`` runs it, without a fresh interpreter each.

``torchrun --nproc-per-node=N script.py ...`` starts N + 1 interpreters, and each spends
about 10 s of CPU importing torch, torch_geometric and pyg_dist before the script's first
line: on 2 cores that was most of what an end-to-end test of an example cost.
:func:`run_script` forks every rank from the fork server of :mod:`pyg_dist.testing._launch`
(which imported them once) and runs the script there as ``__main__``, with its
``sys.argv``, torchrun's environment variables and a session of its own. This process
plays torchrun's agent: it hosts a new rendezvous store for every attempt, gathers every
rank's output into one stream, stops the other ranks when one fails (SIGTERM, then
SIGKILL after a grace period), restarts them all up to ``max_restarts`` times
(``TORCHELASTIC_RESTART_COUNT``), and returns the exit code torchrun would (0, or 1 after
a failure).

What differs from torchrun: modules the fork server imported read their environment
variables then, not the script's (see :mod:`pyg_dist.testing._launch`); the failure report
is one line per failed rank, not torchrun's; elastic membership (``--rdzv-backend c10d``
with changing nodes) is not modelled. Tests of torchrun's own behaviour (its report, its
signals, a lost agent, several machines) start the real one.
"""
from __future__ import annotations

import atexit
import faulthandler
import io
import os
import runpy
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from pyg_dist.testing._launch import free_port, process_context, torchrun_env

#: seconds a failed attempt's other ranks get to end after SIGTERM (torchrun: 30)
STOP_GRACE_S = 10.0


@dataclass
class ScriptRun:
    """A finished :func:`run_script`: the exit code torchrun would have returned."""
    cmd: List[str]
    returncode: int
    output: str
    seconds: float
    timed_out: bool = False
    pids: List[int] = field(default_factory=list)  # every rank of every attempt

    def describe(self) -> str:
        return (f"$ {' '.join(self.cmd)}\nexit code {self.returncode} after "
                f"{self.seconds:.1f}s{' (timed out)' if self.timed_out else ''}; output:\n"
                f"{self.output[-12000:]}")


def run_script(script: Union[Path, str], args: Sequence[str] = (), nproc: int = 1, *,
               timeout: float = 120.0, max_restarts: int = 0,
               extra_env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None,
               rank_args: Optional[Sequence[Sequence[str]]] = None,
               torchrun: bool = True, module: bool = False) -> ScriptRun:
    """Runs ``script args`` on ``nproc`` local ranks, as ``torchrun --nproc-per-node``.

    Args:
        module: ``script`` names a module, run as ``python -m script``.
        rank_args: per-rank arguments instead of ``args`` (one list per rank).
        torchrun: False runs ``nproc`` plain ``python script`` processes (no torchrun
            variables, no restarts): for scripts that rendezvous on their own.
        timeout: seconds for all attempts together; then every rank is killed and the
            result has ``timed_out`` set (``returncode`` -9).
    """
    argvs = [list(a) for a in rank_args] if rank_args is not None else [list(args)] * nproc
    if len(argvs) != nproc:
        raise ValueError(f"rank_args has {len(argvs)} entries for nproc={nproc}")
    if not torchrun and max_restarts:
        raise ValueError("max_restarts needs torchrun=True")
    fd, log = tempfile.mkstemp(prefix="pyg_dist-script-", suffix=".log")
    os.close(fd)
    started = time.monotonic()
    deadline = started + timeout
    pids: List[int] = []
    try:
        for attempt in range(max_restarts + 1):
            code = _attempt((str(script), module), argvs, attempt, max_restarts,
                            extra_env or {}, str(cwd or os.getcwd()), log, deadline, pids,
                            torchrun)
            if code != 1 or attempt == max_restarts:
                break
            _note(log, f"restarting every rank (restart {attempt + 1} of {max_restarts})")
        output = Path(log).read_text(errors="replace")
    finally:
        os.unlink(log)
    cmd = [f"[forked torchrun --nproc-per-node={nproc} --max-restarts={max_restarts}]"
           if torchrun else f"[{nproc} forked python]", *(["-m"] if module else []),
           str(script), *argvs[0]]
    return ScriptRun(cmd, code, output, time.monotonic() - started, code == -9, pids)


def _attempt(script: Tuple[str, bool], argvs: List[List[str]], attempt: int, max_restarts: int,
             extra_env: Dict[str, str], cwd: str, log: str, deadline: float,
             pids: List[int], torchrun: bool) -> int:
    """One attempt: every rank started, watched and ended; 0, 1 (a rank failed) or -9."""
    import torch.distributed as dist

    nproc, store, base = len(argvs), None, dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        base.pop(key, None)  # only the launcher's own, as torchrun gives
    if torchrun:
        port = free_port()  # a new store per attempt, as torchrun's agent makes
        store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                              timeout=timedelta(seconds=max(deadline - time.monotonic(), 1)),
                              wait_for_workers=False)
    ctx = process_context("forkserver")
    procs = []
    for rank in range(nproc):
        env = dict(base)
        if torchrun:
            env.update(torchrun_env(rank, nproc, port), ROLE_RANK=str(rank),
                       ROLE_WORLD_SIZE=str(nproc), GROUP_WORLD_SIZE="1",
                       TORCHELASTIC_RESTART_COUNT=str(attempt),
                       TORCHELASTIC_MAX_RESTARTS=str(max_restarts),
                       TORCHELASTIC_RUN_ID="none")
        env.update(extra_env)  # the caller's variables win, as on torchrun's command line
        proc = ctx.Process(target=_rank_main, name=f"rank{rank}", daemon=False,
                           args=(script, argvs[rank], env, log, cwd,
                                 max(deadline - time.monotonic(), 1)))
        proc.start()
        procs.append(proc)
        pids.append(proc.pid)
    try:
        return _watch(procs, log, deadline)
    finally:
        _stop(procs, signal.SIGKILL, 0)
        del store


def _watch(procs: List[Any], log: str, deadline: float) -> int:
    """Waits for every rank; on the first failure stops the others (torchrun's policy)."""
    while time.monotonic() < deadline:
        codes = [p.exitcode for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            for rank, code in failed:
                how = (f"signal {signal.Signals(-code).name}" if code < 0
                       else f"exit code {code}")
                _note(log, f"rank {rank} (local_rank: {rank}) failed with {how}")
            _stop(procs, signal.SIGTERM, STOP_GRACE_S)
            return 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.05)
    _note(log, "timed out: killing every rank")
    return -9


def _stop(procs: List[Any], sig: int, grace: float) -> None:
    """Sends ``sig`` to each live rank's session (its sampler workers too), waits up to
    ``grace`` seconds, then SIGKILLs what is left and reaps every rank."""
    for sent in (sig, signal.SIGKILL):
        for proc in procs:
            if proc.exitcode is None:
                try:
                    os.killpg(proc.pid, sent)  # each rank leads its session's group
                except OSError:
                    pass
        end = time.monotonic() + (grace if sent != signal.SIGKILL else 10)
        for proc in procs:
            proc.join(max(end - time.monotonic(), 0.01))
        if all(p.exitcode is not None for p in procs):
            return


def _note(log: str, text: str) -> None:
    with open(log, "a") as f:
        f.write(f"[run_script] {text}\n")


def _rank_main(script: Tuple[str, bool], argv: List[str], env: Dict[str, str], log: str,
               cwd: str, timeout: float) -> None:
    """A rank: the script (a path, or a module when ``script[1]``) as ``__main__``, its
    output appended to ``log``; ends the process with the exit code ``python script``
    would have."""
    target, module = script
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [target, *argv]
    sys.path[0] = cwd if module else os.path.dirname(os.path.abspath(target))
    faulthandler.enable(all_threads=True)
    faulthandler.dump_traceback_later(max(timeout - 5, 1), exit=False)
    code = 0
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # as the interpreter reports an uncaught exception
        traceback.print_exc()
        code = 1
    faulthandler.cancel_dump_traceback_later()
    for thread in threading.enumerate():  # as the interpreter waits at its end
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1
