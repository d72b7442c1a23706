"""Memory a chunked graph's counts imply, checked before anything is sized by them.

The counts in ``metadata.json`` are untrusted: node counts in particular need not match
any file (a node type without data). Every path that reads a chunked folder first turns
the counts into the memory they imply, a lower bound per path, and refuses an input
that needs more than it may use with :class:`ChunkedTooLargeError` (one line), instead
of trying to allocate it.
"""
from __future__ import annotations

from typing import Optional

from pyg_dist.chunked._errors import ChunkedTooLargeError
from pyg_dist.memory import available_memory

#: what assembling a graph in memory and partitioning it holds per node, at least (the
#: in-memory partitioner measured 73 bytes per node with the random method, more with METIS)
IN_MEMORY_BYTES_PER_NODE = 64
#: per edge, at least: ``edge_index`` (16 bytes) and its partitioned copy
IN_MEMORY_BYTES_PER_EDGE = 32


def format_size(num_bytes: float) -> str:
    """Bytes as ``"1.5GB"`` (binary units, as ``parse_size`` reads them)."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(num_bytes) < 1024 or unit == "PB":
            return f"{num_bytes:.0f}{unit}" if unit == "B" else f"{num_bytes:.1f}{unit}"
        num_bytes /= 1024
    raise AssertionError("unreachable")


def check_memory(need: int, what: str, limit: Optional[int] = None,
                 hint: str = "") -> None:
    """Raises :class:`ChunkedTooLargeError` when ``need`` bytes exceed ``limit`` (default:
    the memory available on this machine now; nothing is checked where that is unknown).

    Args:
        need (int): bytes the input implies.
        what (str): what needs them, e.g. ``"its 10^15 nodes"``; names the file.
        limit (int, optional): the bytes allowed (a budget), else the machine's.
        hint (str): what to do, appended to the message.
    """
    available = available_memory() if limit is None else limit
    if available is None or need <= available:
        return
    have = f"the {format_size(available)} " + ("of the budget" if limit is not None else
                                               "of memory available on this machine")
    raise ChunkedTooLargeError(f"{what} need at least {format_size(need)}, more than {have}"
                               + (f"; {hint}" if hint else ""))


def in_memory_bytes(num_nodes: int, num_edges: int, data_bytes: int) -> int:
    """What assembling a graph in memory and partitioning it needs, at least: per node
    and per edge (:data:`IN_MEMORY_BYTES_PER_NODE`, :data:`IN_MEMORY_BYTES_PER_EDGE`),
    and the data rows twice (read, then copied into partitions)."""
    return num_nodes * IN_MEMORY_BYTES_PER_NODE + num_edges * IN_MEMORY_BYTES_PER_EDGE \
        + 2 * data_bytes
