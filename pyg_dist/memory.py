"""Memory of this process and machine: RSS/PSS held, memory available, giving freed memory back.

Process figures: resident (RSS) and proportional (PSS) set size.

PSS divides every shared page by the number of processes mapping it, so the PSS of
all trainers on a machine sums to what they really hold together; with mapped
partitions that is about one copy of the partition, whatever their number.
"""
from __future__ import annotations

from typing import Dict, Optional

__all__ = ["process_memory", "release_free_memory", "available_memory"]


def process_memory(pid: str = "self") -> Dict[str, Optional[float]]:
    """``{"rss_mb": ..., "pss_mb": ..., "anon_mb": ...}`` of process ``pid`` from
    ``/proc/<pid>/smaps_rollup`` (``None`` where the kernel does not provide it).
    ``anon_mb`` is the process's own (anonymous) memory; the rest of its PSS is its
    share of mapped files (partitions, libraries)."""
    out: Dict[str, Optional[float]] = {"rss_mb": None, "pss_mb": None, "anon_mb": None}
    names = {"Rss": "rss_mb", "Pss": "pss_mb", "Anonymous": "anon_mb"}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in names:
                    out[names[key]] = round(int(rest.split()[0]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return out


_LIBC: list = []


def release_free_memory() -> None:
    """Hands memory this process has freed back to the operating system (glibc's
    ``malloc_trim``). glibc keeps freed blocks in every thread's arena for reuse, and
    they count against a memory cgroup: after a series of exchanges a partitioning
    rank held 2x the arrays it still used. A no-op where glibc is absent."""
    if not _LIBC:
        import ctypes
        import ctypes.util

        try:
            _LIBC.append(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim)
        except (OSError, AttributeError):
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0](0)


def available_memory() -> Optional[int]:
    """Bytes of memory available to new allocations (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
