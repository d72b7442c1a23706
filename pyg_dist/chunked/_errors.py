"""Errors of the chunked graph reader: each one a single line naming the file."""
from __future__ import annotations

from pyg_dist.datasets._errors import DatasetError


class ChunkedFormatError(DatasetError):
    """A chunked graph folder that cannot be used: one line naming the file."""


class ChunkedTooLargeError(ChunkedFormatError):
    """Counts in ``metadata.json`` that imply more memory than the budget or the machine
    has: one line naming the counts, the memory they need and what is available."""
