"""The one base of every error pyg_dist raises on purpose.

Each error class of the library derives from :class:`PygDistError` *and* keeps its
built-in base (``ValueError``, ``RuntimeError``, ``FileNotFoundError``, ...), so both
``except pyg_dist.PygDistError`` (anything the library reports) and the usual
``except ValueError`` keep working::

    try:
        store = LocalGraphStore.from_partition("parts/cora", 0)
    except pyg_dist.PygDistError as exc:
        print(f"cannot train: {exc}")

This module imports nothing of pyg_dist: every layer may derive from it.
"""
from __future__ import annotations

__all__ = ["PygDistError"]


class PygDistError(Exception):
    """Base class of the errors pyg_dist raises (a one-line message naming the problem)."""
