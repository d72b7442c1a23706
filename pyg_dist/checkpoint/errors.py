"""The error a damaged, forged or mismatched checkpoint raises."""
from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint is incomplete, damaged, of another kind or version, or does not fit
    the objects it is loaded into. The message names the file or the entry."""
