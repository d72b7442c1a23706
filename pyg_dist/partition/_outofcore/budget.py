"""Memory budgets of the out-of-core partitioner: parsing, splitting, checking, measuring.

The budget bounds what the partitioner holds beyond its node-sized arrays (a few
int64 per node): edge chunk buffers, the edges of one partition while they are put in
CSC order, and blocks of feature rows. Memory-mapped scratch files are paged by the
operating system and are not counted (their pages can always be dropped).
"""
from __future__ import annotations

import re
import resource
from dataclasses import dataclass

from pyg_dist.chunked._limits import format_size
from pyg_dist.errors import PygDistError

__all__ = ["MemoryBudget", "MemoryBudgetError", "parse_size", "format_size", "peak_rss_bytes",
           "OUT_OF_CORE_BYTES_PER_NODE", "DIST_BYTES_PER_NODE"]

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20,
          "MIB": 2**20, "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40,
          "TIB": 2**40}
#: bytes per edge while one partition's edges are put in CSC order: the bucket
#: (source, destination, edge id), the sort permutation and the two output arrays
BYTES_PER_ORDERED_EDGE = 56
#: bytes per edge of one edge chunk while it is read: the ids read (two int64) and its
#: records (three int64)
BYTES_PER_STREAMED_EDGE = 40
#: what the out-of-core partitioner holds per node beyond its budget (README: "about 100
#: bytes per node plus at most the budget")
OUT_OF_CORE_BYTES_PER_NODE = 100
#: what a rank of the multi-machine partitioner holds per node of its share beyond its
#: budget (README: "about 170 bytes per node of a rank's share on top of the budget")
DIST_BYTES_PER_NODE = 170


class MemoryBudgetError(ValueError, PygDistError):
    """The memory budget is too small for a step; the message names the size needed."""


def parse_size(text: str) -> int:
    """``"4GB"``, ``"512MiB"``, ``"300k"``, ``"1e9"`` -> bytes (binary units: 1 KB = 1024 B).

    Raises:
        ValueError: naming the text when it is not a positive size.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"memory budget {text!r} is not a size such as 4GB, 512MB or 300KB")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"memory budget {text!r} must be positive")
    return value


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux ``ru_maxrss``, in bytes)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@dataclass(frozen=True)
class MemoryBudget:
    """How the budget is shared between the steps that stream.

    Args:
        total (int): the budget in bytes.
    """
    total: int

    @property
    def buffer_bytes(self) -> int:
        """Edge records buffered in memory (all partitions together) before a flush: a
        sixteenth of the budget (the chunk being split comes on top)."""
        return max(self.total // 16, 1)

    def block_rows(self, row_bytes: int) -> int:
        """Feature rows copied per block: a quarter of the budget (at least one row)."""
        return max(self.total // (4 * max(row_bytes, 1)), 1)

    def check_ordered_edges(self, num_edges: int, what: str,
                            bytes_per_edge: int = BYTES_PER_ORDERED_EDGE) -> None:
        """Raises :class:`MemoryBudgetError` when ``num_edges`` edges cannot be put in
        CSC order within the budget (the message names the budget needed)."""
        self.check(num_edges * bytes_per_edge, f"{what} has {num_edges} edges, which need "
                   f"about {{need}} to put in CSC order")

    def check_streamed_edges(self, num_edges: int, what: str) -> None:
        """Raises :class:`MemoryBudgetError` when a chunk of ``num_edges`` edges cannot be
        read and turned into edge records within the budget."""
        self.check(num_edges * BYTES_PER_STREAMED_EDGE, f"{what} holds {num_edges} edges, "
                   f"which need about {{need}} to read (chunk files are read whole)")

    def check(self, need: int, what: str) -> None:
        """Raises :class:`MemoryBudgetError` naming ``what`` (``{need}`` in it: the size)
        and the budget to pass when ``need`` bytes exceed the budget."""
        if need > self.total:
            raise MemoryBudgetError(
                f"--memory-budget {format_size(self.total)} is too small: "
                f"{what.format(need=format_size(need))}; pass --memory-budget "
                f"{format_size(need * 1.1)} or more")
