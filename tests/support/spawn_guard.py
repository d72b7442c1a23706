"""Notices, while a test runs, every process it starts (for the ``multiprocess`` marker).

:mod:`tests.support.spawn_scan` reads the tests; this guard watches them run, so a
process that only a library call starts (a loader's sampler workers, METIS in a child)
is seen too. ``subprocess``, ``os.fork``/``os.exec*``/``os.posix_spawn`` and
``os.system`` raise audit events; ``multiprocessing``'s spawn and forkserver starts do
not, so :meth:`multiprocessing.process.BaseProcess.start` is wrapped while installed.
"""
from __future__ import annotations

import multiprocessing.process
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

AUDIT_EVENTS = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec",
                "os.spawn", "os.system")
# a library's one-off probe for a shared library (``ctypes.util.find_library``), not a
# process the test runs
PROBES = {"ldconfig", "gcc", "cc", "ld", "objdump", "uname"}


class SpawnGuard:
    """Records the process starts made between :meth:`begin` and :meth:`end`.

    Only one guard is installed per interpreter (audit hooks cannot be removed, so the
    hook stays and goes quiet after :meth:`uninstall`).
    """

    _installed: Optional["SpawnGuard"] = None
    _hooked = False

    def __init__(self) -> None:
        self.current: Optional[List[str]] = None
        self._original: Optional[Callable[..., Any]] = None

    @classmethod
    def active(cls) -> Optional["SpawnGuard"]:
        """The guard installed in this interpreter, if any."""
        return cls._installed

    def install(self) -> None:
        """Starts watching (audit hook plus the ``BaseProcess.start`` wrapper)."""
        if SpawnGuard._installed is not None:
            raise RuntimeError("a SpawnGuard is already installed in this interpreter")
        SpawnGuard._installed = self
        if not SpawnGuard._hooked:
            sys.addaudithook(_audit)
            SpawnGuard._hooked = True
        original = multiprocessing.process.BaseProcess.start
        self._original = original

        def start(proc: multiprocessing.process.BaseProcess) -> None:
            self.record(f"multiprocessing.Process.start ({proc.name})")
            original(proc)

        multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]

    def uninstall(self) -> None:
        """Stops watching and restores ``BaseProcess.start``."""
        if self._original is not None:
            multiprocessing.process.BaseProcess.start = self._original  # type: ignore
            self._original = None
        if SpawnGuard._installed is self:
            SpawnGuard._installed = None

    def begin(self) -> None:
        """Starts a fresh record (a test's setup, call or teardown begins)."""
        self.current = []

    def end(self) -> Tuple[str, ...]:
        """Stops recording; the process starts seen since :meth:`begin`."""
        seen, self.current = tuple(self.current or ()), None
        return seen

    def record(self, what: str) -> None:
        """Notes one process start when recording."""
        if self.current is not None and len(self.current) < 20:
            self.current.append(what)


def _audit(event: str, args: Tuple[Any, ...]) -> None:
    guard = SpawnGuard._installed
    if guard is None or guard.current is None or not event.startswith(AUDIT_EVENTS):
        return
    detail = ""
    if event == "subprocess.Popen" and args:
        argv = args[1] if len(args) > 1 else args[0]
        words = argv.split() if isinstance(argv, str) else [str(a) for a in argv or ()]
        if words and Path(words[0]).name in PROBES:
            return
        detail = f" ({' '.join(words)[:120]})"
    guard.record(event + detail)
