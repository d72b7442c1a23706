"""Routing work by owner: split ids by the range that owns them, send the remote requests
first, do the local part meanwhile, handle every reply as it arrives.

One helper for everything that reaches rows owned elsewhere: hop sampling, link
seeding, feature fetches, and :class:`~pyg_dist.DistTensor` reads and writes. Owners
are partitions (a range partition book) or ranks (a tensor's row layout); both are
``offsets``: owner ``o`` holds ids ``[offsets[o], offsets[o + 1])``.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, List, Optional, Sequence, Tuple, TypeVar

import numba
import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import PygDistError

T = TypeVar("T")
R = TypeVar("R")


class RemoteResponseError(RuntimeError, PygDistError):
    """A peer's response does not match its request or this process's schema."""


@numba.njit(cache=True, nogil=True)
def _owner(v, upper):
    """The range of ``upper`` (range ends) that holds ``v`` (below ``upper[-1]``)."""
    if upper.shape[0] > 8:
        return np.searchsorted(upper, v, side="right")
    o = 0
    while v >= upper[o]:
        o += 1
    return o


@numba.njit(cache=True, nogil=True)
def _group_by_owner(ids, upper):
    """Positions of ``ids`` grouped by owning range (``upper`` = range ends), stable, the
    ids in the same order, and the count per owner. Ids must lie in ``[0, upper[-1])``."""
    n, parts = ids.shape[0], upper.shape[0]
    counts = np.zeros(parts, dtype=np.int64)
    for i in range(n):
        counts[_owner(ids[i], upper)] += 1
    at = np.zeros(parts, dtype=np.int64)
    for p in range(1, parts):
        at[p] = at[p - 1] + counts[p - 1]
    order = np.empty(n, dtype=np.int64)
    grouped = np.empty(n, dtype=np.int64)
    for i in range(n):
        o = _owner(ids[i], upper)
        order[at[o]] = i
        grouped[at[o]] = ids[i]
        at[o] += 1
    return order, grouped, counts


def group_by_owner(ids: Tensor, offsets: Sequence[int], what: str = "ids"
                   ) -> List[Tuple[int, Tensor, Tensor]]:
    """``(owner, positions, owned)`` for every owner of some of ``ids``: owners
    ascending, positions into ``ids`` in their original order, ``owned`` =
    ``ids[positions]`` as int64 (made in the same pass).

    Args:
        ids (Tensor): 1-D integer ids.
        offsets (Sequence[int]): ``num_owners + 1`` non-decreasing range bounds from 0.
        what (str): what the ids are (for the error message).

    Raises:
        ValueError: if an id lies outside ``[0, offsets[-1])``.
    """
    bounds = torch.as_tensor(offsets, dtype=torch.long)
    total = int(bounds[-1])
    if ids.numel() == 0:
        return []
    lo, hi = (int(v) for v in torch.aminmax(ids))
    if lo < 0 or hi >= total:
        raise ValueError(f"{what}: id {lo if lo < 0 else hi} is out of range [0, {total})")
    if bounds.numel() == 2:
        return [(0, torch.arange(ids.numel()), ids.long())]
    keys = ids.detach().contiguous().numpy().astype(np.int64, copy=False)
    order, grouped, counts = _group_by_owner(keys, bounds[1:].contiguous().numpy())
    sizes = counts.tolist()
    return [(o, pos, owned) for o, (pos, owned) in enumerate(zip(
        torch.from_numpy(order).split(sizes), torch.from_numpy(grouped).split(sizes)))
        if pos.numel()]


def split_by_owner(ids: Tensor, offsets: Sequence[int], what: str = "ids"
                   ) -> List[Tuple[int, Tensor]]:
    """``(owner, positions)`` for every owner of some of ``ids``: owners ascending,
    positions into ``ids`` in their original order (:func:`group_by_owner` without the
    ids).

    Raises:
        ValueError: if an id lies outside ``[0, offsets[-1])``.
    """
    return [(o, pos) for o, pos, _ in group_by_owner(ids, offsets, what)]


async def fan_out(requests: Sequence[Tuple[T, Awaitable[R]]],
                  local: Optional[Callable[[], Any]] = None,
                  on_reply: Optional[Callable[[T, R], Any]] = None) -> None:
    """Runs ``local()`` while ``requests`` (already sent) are in flight, then hands every
    reply to ``on_reply(tag, reply)`` in the order they arrive.

    Every request is awaited, even after a failure, before the first failure (of
    ``local``, a request, or ``on_reply``) is raised: no exception is left unretrieved,
    and no reply is still due for buffers the caller is about to drop.

    Args:
        requests: ``(tag, awaitable)`` pairs, sent before this is called.
        local: the local part, run before any reply is awaited.
        on_reply: handles one reply (checks it, scatters its rows back).
    """
    tasks = [asyncio.ensure_future(_tagged(tag, reply)) for tag, reply in requests]
    error: Optional[BaseException] = None
    try:
        if local is not None:
            local()
    except BaseException as exc:  # raised once every request has settled
        error = exc
    for done in asyncio.as_completed(tasks):
        try:
            tag, reply = await done
            if error is None and on_reply is not None:
                on_reply(tag, reply)
        except BaseException as exc:  # the first failure wins; the others are retrieved
            error = error or exc
    if error is not None:
        raise error


async def _tagged(tag: T, reply: Awaitable[R]) -> Tuple[T, R]:
    return tag, await reply
