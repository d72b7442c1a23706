"""Who is writing a partition folder, and cleaning up after writers that were killed.

:func:`pyg_dist.format._files.atomic_dir` writes ``OUT`` through a hidden folder
``.OUT.<token>.tmp`` beside it, and moves a replaced output aside as
``.OUT.<token>.old`` for a moment. Before creating them the writer records who it
is in ``.OUT.<token>.owner``: host name, boot id, pid namespace, pid and the
process's start time. A run killed meanwhile leaves these behind (full size). The
next write of ``OUT`` calls :func:`clean_stale`, which removes the leftovers whose
writer is provably gone (same host, boot and pid namespace, and no process with
that pid and start time exists) and warns about the others, which it leaves alone:
a writer on another host, one still running, or a folder without an owner record
(e.g. from an older pyg_dist).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

from pyg_dist.format._jsonio import read_json

_KINDS = ("tmp", "old", "owner")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _start_time(pid: int) -> Optional[int]:
    """Start time of process ``pid`` (clock ticks after boot; Linux), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # exists under another user, or cannot be asked: assume alive
    return True


@dataclass(frozen=True)
class Writer:
    """The process writing a partition folder.

    Args:
        host (str): ``socket.gethostname()`` of its machine.
        boot_id (str): the kernel's boot id (Linux; empty elsewhere).
        pid (int): its process id.
        start (int, optional): its start time (clock ticks after boot; Linux), which
            tells it apart from a later process given the same pid.
        pid_ns (str): its pid namespace (Linux; e.g. containers sharing a host name
            see different pids).
    """
    host: str
    boot_id: str
    pid: int
    start: Optional[int]
    pid_ns: str = ""

    @classmethod
    def current(cls) -> "Writer":
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), pid, _start_time(pid), _pid_namespace())

    def is_gone(self) -> bool:
        """``True`` only when this writer provably no longer runs."""
        if self.host != socket.gethostname():
            return False
        boot = _boot_id()
        if self.boot_id and boot and self.boot_id != boot:
            return True  # the machine restarted since
        ns = _pid_namespace()
        if self.pid_ns and ns and self.pid_ns != ns:
            return False  # its pids are not ours to look up
        start = _start_time(self.pid)
        if start is not None:
            return self.start is not None and start != self.start
        return not _pid_alive(self.pid)

    @classmethod
    def from_file(cls, path: Path) -> Optional["Writer"]:
        """The writer recorded in ``path``, or None if it is missing or malformed."""
        try:
            obj = read_json(path, ValueError)
            writer = cls(str(obj["host"]), str(obj["boot_id"]), int(obj["pid"]),
                         None if obj["start"] is None else int(obj["start"]),
                         str(obj.get("pid_ns", "")))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return writer


def _owner(tmp: Path) -> Path:
    return tmp.with_suffix(".owner")


def old_path(tmp: Path) -> Path:
    """Where :func:`~pyg_dist.format._files.atomic_dir` moves a replaced output aside."""
    return tmp.with_suffix(".old")


def claim(out: Path, writer: Optional[Writer] = None) -> Path:
    """Records ``writer`` (default: this process) and creates its hidden temporary
    folder beside ``out``; returns the folder."""
    writer = writer or Writer.current()
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".owner", dir=out.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(writer), f)
    tmp = Path(name).with_suffix(".tmp")
    os.mkdir(tmp)
    return tmp


def release(tmp: Path, out: Path) -> None:
    """Removes what :func:`claim` created that is still there (the owner record last).

    A replaced output moved aside is kept while ``out`` is missing.
    """
    shutil.rmtree(tmp, ignore_errors=True)
    if out.exists():
        shutil.rmtree(old_path(tmp), ignore_errors=True)
    if not tmp.exists() and not old_path(tmp).exists():
        _owner(tmp).unlink(missing_ok=True)


def _leftovers(out: Path) -> Dict[str, Dict[str, Path]]:
    """Hidden leftovers of writes of ``out``, by token and kind (tmp/old/owner)."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.([A-Za-z0-9_]+)\.({'|'.join(_KINDS)})")
    found: Dict[str, Dict[str, Path]] = {}
    if not out.parent.is_dir():
        return found
    for path in out.parent.iterdir():
        match = pattern.fullmatch(path.name)
        if match:
            found.setdefault(match.group(1), {})[match.group(2)] = path
    return found


def _kept(out: Path, writer: Optional[Writer], paths: List[Path]) -> str:
    names = ", ".join(str(p) for p in paths)
    if writer is None:
        who = "a writer that left no owner record (e.g. an older pyg_dist)"
    elif writer.host != socket.gethostname() or writer.pid_ns not in ("", _pid_namespace()):
        who = (f"pid {writer.pid} on host {writer.host} (pid namespace {writer.pid_ns}), "
               f"which may still be running")
    else:
        who = f"pid {writer.pid} on this host, which is still running"
    return (f"left {names} alone: written for {out} by {who}; delete it by hand once no "
            f"partition run is writing {out}")


def clean_stale(out: Path) -> List[Path]:
    """Removes the leftovers of killed writes of ``out`` whose writer is provably gone.

    A replaced output moved aside (``.old``) while ``out`` is missing is moved back
    to ``out`` (the killed run had not finished). Leftovers whose writer may still
    run, or is unknown, are kept with a warning.

    Returns:
        The leftover folders removed or moved back.
    """
    out = Path(out)
    done: List[Path] = []
    for _, paths in sorted(_leftovers(out).items()):
        owner = paths.get("owner")
        writer = Writer.from_file(owner) if owner is not None else None
        folders = [paths[k] for k in ("tmp", "old") if k in paths]
        if writer is None or not writer.is_gone():
            if folders:
                warnings.warn(_kept(out, writer, folders), stacklevel=2)
            continue
        old = paths.get("old")
        if old is not None and not out.exists():
            os.replace(old, out)
            warnings.warn(f"restored {out} from {old}, which a killed partition run had "
                          f"moved aside to replace it", stacklevel=2)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        if owner is not None and not any(f.exists() for f in folders):
            owner.unlink(missing_ok=True)
        done += folders
    return done
