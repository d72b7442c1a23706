"""A batch's per-edge columns as its hops grow them: destinations repeated per edge
straight into their place (:func:`repeat_into`), and the edges' original ids kept in
one buffer the kernels draw into (:class:`Column`). Used by
:class:`~pyg_dist.sampler._hop_state.HopState`.
"""
from __future__ import annotations

from typing import Optional

import numba
import numpy as np
import torch
from torch import Tensor

from pyg_dist.sampler._runs import Runs, take_runs

_JIT = dict(cache=True, nogil=True)


@numba.njit(**_JIT)
def _repeat_into(values, counts, out):
    """``out`` = each of ``values`` repeated ``counts`` times, in order; returns the
    number of values written, or ``-1`` (nothing written) if a count is negative or
    the counts do not add up to ``out``'s length."""
    total = 0
    for i in range(counts.shape[0]):
        if counts[i] < 0:
            return -1
        total += counts[i]
    if total != out.shape[0]:
        return -1
    o = 0
    for i in range(values.shape[0]):
        v = values[i]
        for t in range(counts[i]):
            out[o + t] = v
        o += counts[i]
    return o


def repeat_into(values: Tensor, counts: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """``torch.repeat_interleave(values, counts)`` (int64), written into ``out`` when
    given (a contiguous 1-D int64 tensor of ``counts.sum()`` values: e.g. a row of the
    batch's final edge tensor, so nothing is allocated or copied later).

    Raises:
        ValueError: if ``values`` and ``counts`` differ in length, a count is negative,
            or ``out`` is not a contiguous 1-D int64 tensor of the counts' total.
    """
    if values.dim() != 1 or counts.dim() != 1 or values.numel() != counts.numel():
        raise ValueError(f"repeat_into: {tuple(values.shape)} values for "
                         f"{tuple(counts.shape)} counts (1-D, one count per value)")
    v = values.detach().contiguous().numpy().astype(np.int64, copy=False)
    c = counts.detach().contiguous().numpy().astype(np.int64, copy=False)
    if out is None:
        total = int(c.sum()) if c.size else 0
        out = torch.empty(max(total, 0), dtype=torch.long)
    if out.dtype != torch.long or out.dim() != 1 or not out.is_contiguous():
        raise ValueError(f"repeat_into: out must be a contiguous 1-D int64 tensor, got "
                         f"{tuple(out.shape)} {out.dtype}")
    if _repeat_into(v, c, out.numpy()) != out.numel():
        raise ValueError(f"repeat_into: counts must be non-negative and add up to "
                         f"{out.numel()} (got {c.tolist()[:8]}...)")
    return out


class Column:
    """One int64 column of a batch's sampled edges (their original ids), grown across
    hops: a piece is copied onto its end, unless a kernel drew it straight into
    :meth:`spare` (then it costs nothing), so the batch needs no concatenation at the
    end. Pieces drawn in place are appended in the order their room was handed out
    (the sampler merges the hops run in this process first, in that order), so each
    is found where it was drawn.

    Args:
        capacity (int): room to start with (what the last batch needed).
    """

    def __init__(self, capacity: int) -> None:
        self.data = torch.empty(max(int(capacity), 0), dtype=torch.long)
        self.size = 0
        self.peak = 0  # the most room needed so far (the next batch's capacity)

    def spare(self, n: int, ahead: int = 0) -> Tensor:
        """Room for a kernel to draw at least ``n`` values into, after the end and the
        ``ahead`` values that pieces to be appended before this one take."""
        self._reserve(ahead + n)
        return self.data[self.size + ahead:]

    def _reserve(self, n: int) -> None:
        self.peak = max(self.peak, self.size + n)
        if self.size + n > self.data.numel():
            grown = torch.empty(max(2 * self.data.numel(), self.size + n), dtype=torch.long)
            grown[:self.size] = self.data[:self.size]
            self.data = grown

    def append(self, piece: Tensor) -> None:
        """Adds ``piece`` at the end (nothing is copied when it was drawn in place)."""
        n = piece.numel()
        if n == 0:
            return
        if not (self.size + n <= self.data.numel()
                and piece.data_ptr() == self.data[self.size:].data_ptr()):
            self._reserve(n)
            self.data[self.size:self.size + n] = piece
        self.size += n

    def order_tail(self, start: int, runs: Runs) -> None:
        """Puts the values from ``start`` to the end (the pieces of one hop, appended in
        concatenation order) in the merged order of ``runs``."""
        tail = self.data[start:self.size]
        take_runs(tail.clone(), runs, out=tail)

    def result(self) -> Tensor:
        """The column: a view of the buffer, or a copy where it would hold a third more
        memory than the column needs."""
        out = self.data[:self.size]
        return out if 4 * self.size >= 3 * self.data.numel() else out.clone()
