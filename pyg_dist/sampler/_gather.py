"""Copying rows between CPU tensors: a bounds-checked, prefetching gather/scatter.

Every copy is checked before the kernel runs (:func:`place` raises ``ValueError``
rather than read or write outside a tensor); rows that arrive in a wire type
(:mod:`pyg_dist.sampler._wire`) are cast to the output's type as they are placed, and
int32 ids (id files store them so where they fit) are widened to int64 as they are
copied.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numba
import numpy as np
import torch
from torch import Tensor

from pyg_dist.sampler._checks import check_index
from pyg_dist.sampler._sample_kernels import PREFETCH_AHEAD, prefetch

Rows = Union[Tensor, Tuple[int, int]]  # output rows: positions, or a range [start, stop)
_NO_ROWS = torch.empty(0, dtype=torch.long)
_WIDENS = ((torch.int32, torch.int64),)  # (source, output) dtypes of 1-D copies that widen
_JIT = dict(cache=True, nogil=True)
#: rows at least this wide go into a range of the output through ``torch.index_select``
#: (a vectorised copy per row): measured against :func:`_copy_rows` on random rows, it
#: is as fast on 200k rows of 400 B and 0.81-0.97 of the time on rows of 64-1024 B of a
#: 2.4M-row table, on an Intel VM; in the loader, 0.93 (200k) and 0.96 (2.4M) of a batch
_WIDE_ROW_BYTES = 64


@numba.njit(**_JIT)
def _copy_rows(src, src_rows, dst, dst_rows, dst_start, width, line):
    """``dst[dst_rows[i]] = src[src_rows[i]]`` for rows of ``width`` words of flat
    arrays (``dst_start + i`` when ``dst_rows`` is empty; ``line`` words per cache
    line). Unsigned offsets keep the copy loop vectorised."""
    n, scatter = src_rows.shape[0], dst_rows.shape[0] > 0
    if width == 1:  # one word a row (ids, labels): the general loop costs 3x more
        for i in range(n):
            if i + PREFETCH_AHEAD < n:
                prefetch(src, src_rows[i + PREFETCH_AHEAD])
            dst[dst_rows[i] if scatter else dst_start + i] = src[src_rows[i]]
        return
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            for c in range(0, width, line):
                prefetch(src, src_rows[i + PREFETCH_AHEAD] * width + c)
        row = dst_rows[i] if scatter else dst_start + i
        r, p = np.uint64(src_rows[i] * width), np.uint64(row * width)
        for j in range(np.uint64(width)):
            dst[p + j] = src[r + j]


def _words(t: Tensor) -> Tuple[np.ndarray, int]:
    """A contiguous tensor as a flat numpy array of words, and the row width in them:
    one int64 word for 8-byte rows (ids, labels), else int32 words where they divide
    the row, else bytes. Wider rows go as int32 words even where int64 ones divide them:
    measured on rows of 100 float32 (624k random rows of 2.4M), the copy runs in
    ~110 ms in int32 words against ~145 ms in int64 ones (as fast as
    ``torch.index_select`` into a buffer); the same on rows of a 200k-row table."""
    raw = t.reshape(t.size(0), -1).view(torch.uint8)
    if raw.size(1) == 8:
        raw = raw.view(torch.int64)
    elif raw.size(1) % 4 == 0:
        raw = raw.view(torch.int32)
    return raw.reshape(-1).numpy(), raw.size(1)


def place(out: Tensor, out_rows: Rows, src: Tensor, src_rows: Optional[Tensor],
          src_rows_below: Optional[int] = None) -> None:
    """Copies rows of ``src`` (``src_rows``, or all) into rows ``out_rows`` of ``out``
    (of the same dtype, or 1-D int32 into int64). ``src_rows_below``: the caller already
    checked (:func:`~pyg_dist.sampler._checks.check_index`) that ``src_rows`` lie in
    ``[0, src_rows_below)``, e.g. once for several columns read at the same rows; only
    ``src_rows_below <= len(src)`` is then checked here.

    Raises:
        ValueError: if the copy would leave either tensor (rows out of range, another
            row shape or dtype, row counts that differ): the kernel never does.
    """
    _check_copy(out, out_rows, src, src_rows, src_rows_below)
    if out.dim() > 1 and out.shape[1:].numel() == 0:  # zero-width rows
        return
    src = src.detach()
    if src_rows is None:
        if isinstance(out_rows, tuple):
            out.narrow(0, out_rows[0], out_rows[1] - out_rows[0]).copy_(src)
            return
        src_rows = torch.arange(src.size(0))
    if src_rows.numel() == 0:
        return
    if isinstance(out_rows, tuple) and src.dtype == out.dtype and \
            src.shape[1:].numel() * src.element_size() >= _WIDE_ROW_BYTES:
        # wide rows into a range: torch's row copy (a memcpy per row) beats the loop
        torch.index_select(src, 0, src_rows, out=out.narrow(0, out_rows[0], src_rows.numel()))
        return
    start, dst_rows = (out_rows[0], _NO_ROWS) if isinstance(out_rows, tuple) else (0, out_rows)
    (src_words, width), (out_words, _) = _words(src.contiguous()), _words(out)
    _copy_rows(src_words, _index_array(src_rows), out_words, _index_array(dst_rows),
               int(start), width, max(64 // src_words.itemsize, 1))


def place_cast(out: Tensor, out_rows: Rows, src: Tensor) -> None:
    """:func:`place` of all rows of ``src``, cast to ``out``'s type on the way if it
    arrived in a wire type (a range of rows is cast straight into the output)."""
    if src.dtype == out.dtype:
        return place(out, out_rows, src, None)
    if isinstance(out_rows, tuple) and src.dim() == out.dim() and \
            src.shape[1:] == out.shape[1:] and out_rows[1] - out_rows[0] == src.size(0) and \
            0 <= out_rows[0] <= out_rows[1] <= out.size(0):
        out.narrow(0, out_rows[0], src.size(0)).copy_(src)
        return None
    return place(out, out_rows, src.to(out.dtype), None)


def _index_array(rows: Tensor) -> np.ndarray:
    return rows.detach().contiguous().numpy().astype(np.int64, copy=False)


def _check_copy(out: Tensor, out_rows: Rows, src: Tensor, src_rows: Optional[Tensor],
                src_rows_below: Optional[int] = None) -> None:
    """Raises unless every row ``place`` would read and write lies inside its tensor."""
    widens = (src.dtype, out.dtype) in _WIDENS and src.dim() == 1
    if (src.dtype != out.dtype and not widens) or src.dim() != out.dim() or \
            src.shape[1:] != out.shape[1:]:
        raise ValueError(f"cannot copy rows of {src.dtype} {tuple(src.shape[1:])} into "
                         f"rows of {out.dtype} {tuple(out.shape[1:])}: row shape or dtype "
                         f"differs")
    if not out.is_contiguous() or out.device.type != "cpu" or src.device.type != "cpu":
        raise ValueError("rows are copied between CPU tensors into a contiguous output")
    n = src.size(0) if src_rows is None else src_rows.numel()
    if src_rows is not None and src_rows_below is not None and src_rows.numel():
        if src_rows_below > src.size(0):
            raise ValueError(f"source rows checked below {src_rows_below}, but the source "
                             f"has {src.size(0)} rows")
    elif src_rows is not None:
        check_index(src_rows, src.size(0), "source rows")
    if isinstance(out_rows, tuple):
        lo, hi = int(out_rows[0]), int(out_rows[1])
        if lo < 0 or hi > out.size(0) or hi < lo:
            raise ValueError(f"output rows [{lo}, {hi}) out of range [0, {out.size(0)})")
        count = hi - lo
    else:
        check_index(out_rows, out.size(0), "output rows")
        count = out_rows.numel()
    if count != n:
        raise ValueError(f"{n} rows to copy into {count} output rows")
