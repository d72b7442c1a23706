"""Putting one hop's edges from several partitions in a single machine's order.

Each partition answers a hop with its destinations' edges, a destination's edges side by
side (a *run*). A single machine lists them by destination: the merged order is the
runs sorted by destination, each run kept as it is. :func:`seed_runs` finds that order
once per hop and edge type; :func:`take_runs` then moves every per-edge column (sources,
edge ids, original ids) into it run by run, a sequential copy per run, instead of
scattering every edge through a permutation of the edges.

The destinations are positions in the frontier, which the pieces share out between them:
together they fill a range, so the merged order is found by placing each run at its
destination's offset in that range (no sort; a sort only where they do not fill one), and
the destinations repeated per edge are written in one pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numba
import numpy as np
import torch
from torch import Tensor

_JIT = dict(cache=True, nogil=True)


@numba.njit(**_JIT)
def _take_runs(src, starts, counts, order, dst):
    """``dst`` = the runs ``src[starts[j]:starts[j] + counts[j]]`` for ``j`` in
    ``order``, one after the other (the caller checks every run lies in ``src`` and
    ``dst`` holds their total)."""
    o = 0
    for k in range(order.shape[0]):
        j = order[k]
        s, c = starts[j], counts[j]
        for t in range(c):
            dst[o + t] = src[s + t]
        o += c


@numba.njit(**_JIT)
def _place(seed, lo):
    """The merged order of runs whose destinations ``seed`` fill ``[lo, lo + n)``:
    ``order[d - lo]`` = the run of destination ``d``. ``ok`` is False where a
    destination repeats (then they do not fill the range: sort instead)."""
    n = seed.shape[0]
    order = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        d = seed[i] - lo
        if order[d] != -1:
            return order, False
        order[d] = i
    return order, True


@numba.njit(**_JIT)
def _lay_out(seed, count, order, col):
    """Where each run starts in the concatenated pieces (returned), and ``col``: each
    run's destination repeated per edge, runs in merged ``order``. Returns ``-1`` as the
    total (and leaves ``col`` unwritten) if a count is negative or ``col`` is too short."""
    n = seed.shape[0]
    starts = np.empty(n, dtype=np.int64)
    total = 0
    for i in range(n):
        if count[i] < 0:
            return starts, -1
        starts[i] = total
        total += count[i]
    if total > col.shape[0]:
        return starts, -1
    o = 0
    for k in range(n):
        j = order[k]
        d = seed[j]
        for t in range(count[j]):
            col[o + t] = d
        o += count[j]
    return starts, total


@dataclass
class Runs:
    """The runs of concatenated pieces and their merged order.

    Attributes:
        order: runs in merged order (indices into ``starts``/``counts``).
        starts: where each run starts in the concatenated pieces.
        counts: edges per run.
        total: edges in all runs.
        col: the merged edges' destinations (each run's destination, repeated).
    """
    order: np.ndarray
    starts: np.ndarray
    counts: np.ndarray
    total: int
    col: Tensor


def seed_runs(seeds: Sequence[Tensor], counts: Sequence[Tensor],
              col_out: Optional[Tensor] = None) -> Runs:
    """The merged order of pieces given as their destinations (``seeds``; distinct over
    all pieces) and edges per destination (``counts``), pieces in concatenation order.
    ``col_out``: where :attr:`Runs.col` is written (a contiguous 1-D int64 tensor of one
    value per edge, e.g. a row of the batch's final edge tensor); default: a new one.

    Raises:
        ValueError: if a count is negative, the pieces' seeds and counts differ in
            number, or ``col_out`` does not hold one int64 value per edge.
    """
    seed = torch.cat(list(seeds)).long()
    count = torch.cat(list(counts)).long()
    if seed.numel() != count.numel():
        raise ValueError(f"{seed.numel()} destinations but {count.numel()} edge counts")
    keys, per_run = seed.numpy(), count.numpy()
    order, placed = None, False
    if keys.size:
        lo, hi = (int(v) for v in torch.aminmax(seed))
        if hi - lo + 1 == keys.size:
            order, placed = _place(keys, lo)
    if not placed:
        order = torch.argsort(seed, stable=True).numpy()
    total = int(per_run.sum())
    if col_out is None:
        col = torch.empty(max(total, 0), dtype=torch.long)
    elif (col_out.dtype != torch.long or col_out.dim() != 1 or
          not col_out.is_contiguous() or col_out.numel() != total):
        raise ValueError(f"col_out: {tuple(col_out.shape)} {col_out.dtype} for {total} "
                         f"edges (a contiguous 1-D int64 tensor of one value per edge)")
    else:
        col = col_out
    starts, laid = _lay_out(keys, per_run, order, col.numpy())
    if laid != total:
        raise ValueError("a negative edge count")
    return Runs(order, starts, per_run, total, col)


def take_runs(src: Tensor, runs: Runs, out: Optional[Tensor] = None) -> Tensor:
    """``src`` (the concatenated pieces' values, one per edge, 1-D int64) in merged
    order, written into ``out`` (a new tensor by default; not ``src`` itself).

    Raises:
        ValueError: if ``src`` or ``out`` does not hold one value per edge.
    """
    if src.dim() != 1 or src.numel() != runs.total:
        raise ValueError(f"{tuple(src.shape)} values for {runs.total} edges")
    out = torch.empty_like(src) if out is None else out
    if out.shape != src.shape or out.dtype != src.dtype or not out.is_contiguous():
        raise ValueError(f"output {tuple(out.shape)} {out.dtype} for {tuple(src.shape)} "
                         f"{src.dtype} values")
    if runs.total:
        _take_runs(src.contiguous().numpy(), runs.starts, runs.counts, runs.order,
                   out.numpy())
    return out
