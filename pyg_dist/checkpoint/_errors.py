"""The error a damaged, forged or mismatched checkpoint raises."""
from __future__ import annotations

from pyg_dist.errors import PygDistError


class CheckpointError(ValueError, PygDistError):
    """A checkpoint is incomplete, damaged, of another kind or version, or does not fit
    the objects it is loaded into. The message names the file or the entry."""
