"""Agreeing on what must match across ranks: one exchange, the same verdict everywhere.

A collective step (joining RPC, building a loader, creating a distributed tensor)
first gathers from every rank the values that must match (the partitioning, loader
options, worker counts, ...) together with the rank's own error, if it already
failed. Every rank enters the exchange even when it failed, so a failure or a
mismatch on one rank raises on *every* rank, naming the rank and the field, instead
of leaving the others waiting on a peer that will never come.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch.distributed as dist

from pyg_dist.errors import PygDistError
from pyg_dist.rpc import _health as health


class DisagreementError(ValueError, PygDistError):
    """Ranks disagree on a value that must be the same everywhere (raised on every rank)."""


class PeerFailedError(RuntimeError, PygDistError):
    """Another rank failed, or did not answer, during a collective step."""


def exchange(value: Any, what: str, world_size: int, group: Optional[Any] = None) -> List[Any]:
    """Every rank's ``value``, by rank (a collective over the gloo ``group``).

    Raises:
        PeerFailedError: if the exchange fails (a peer died, or did not come within
            the group's timeout), naming silent or failed peers where known.
    """
    if world_size == 1:
        return [value]
    out: List[Any] = [None] * world_size
    try:
        dist.all_gather_object(out, value, group=group)
    except RuntimeError as exc:
        raise PeerFailedError(health.with_diagnosis(
            f"{what}: the exchange with the other ranks failed ({exc})")) from exc
    return out


def agree(what: str, must_match: Dict[str, Any], world_size: int, group: Optional[Any] = None,
          info: Optional[Dict[str, Any]] = None,
          error: Optional[BaseException] = None) -> List[Dict[str, Any]]:
    """Collective: checks that ``must_match`` is equal on every rank.

    Args:
        what: the step, for messages (e.g. ``"DistNeighborLoader"``).
        must_match: named values every rank must give equally (plain data).
        world_size: ranks taking part.
        group: the gloo group to exchange over (``None``: the default group).
        info: per-rank values that may differ, returned to every rank.
        error: this rank's own failure, raised here after the exchange.

    Returns:
        every rank's ``info``, by rank.

    Raises:
        ``error`` on the rank that failed; :class:`PeerFailedError` naming it on the
        others; :class:`DisagreementError` naming the first field that differs and each
        rank's value (the same message on every rank).
    """
    mine = {"fields": must_match, "info": info or {},
            "error": None if error is None else f"{type(error).__name__}: {error}"}
    everyone = exchange(mine, what, world_size, group)
    if error is not None:
        raise error
    failed = [f"rank {r}: {e['error']}" for r, e in enumerate(everyone) if e["error"]]
    if failed:
        raise PeerFailedError(f"{what} failed on other rank(s):\n" + "\n".join(failed))
    for key in sorted({k for e in everyone for k in e["fields"]}):
        values = [e["fields"].get(key) for e in everyone]
        if any(v != values[0] for v in values[1:]):
            raise DisagreementError(f"{what}: ranks disagree on {key} (it must be the same on "
                                    f"every rank): {describe_values(values)}")
    return [e["info"] for e in everyone]


def describe_values(values: Sequence[Any], limit: int = 160) -> str:
    """``rank 0, 2: a; rank 1: b`` (ranks grouped by value, values shortened)."""
    groups: List[List[Any]] = []
    for rank, value in enumerate(values):
        for group in groups:
            if group[0] == value:
                group[1].append(rank)
                break
        else:
            groups.append([value, [rank]])
    parts = []
    for value, ranks in groups:
        text = repr(value)
        text = text if len(text) <= limit else text[:limit - 3] + "..."
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {text}")
    return "; ".join(parts)
