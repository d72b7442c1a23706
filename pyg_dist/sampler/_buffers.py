"""Output buffers reused across batches instead of allocated afresh for each.

A batch's feature rows (``x`` alone is ~75 MB for 187k rows of 100 float32) land in a
new tensor per batch. A tensor that large is above what malloc keeps after a free, so
every batch maps fresh pages, which the kernel faults in and zeroes as the rows are
copied: measured at about a quarter of the copy itself. An :class:`OutputPool` hands out
views of buffers it keeps, and reuses a buffer only once nothing outside the pool holds
its memory any more: the batch it went out in, and every view of it (``batch.x[:10]``
kept by the training loop included), are gone. That is read from the storage's
reference count, so a buffer is never written while anything can still read it. A
buffer moved to shared memory (a batch sent to another process) is never reused: the
receiver maps the same pages.

Buffers are sized with room to spare (the next batch is rarely the same size), so a
view's storage may be somewhat larger than the view; a pool keeps at most ``keep``
buffers per attribute and drops the oldest busy one when it needs room (a buffer held
for good, such as a feature cache's rows, is thereby let go).
"""
from __future__ import annotations

from typing import Dict, Hashable, List, Sequence

import torch
from torch import Tensor

from pyg_dist._madvise import empty_large

#: the smallest output (bytes) worth keeping: below it malloc reuses freed memory itself
MIN_BYTES = 1 << 20
#: room to spare, as a fraction of the rows asked, when a buffer is allocated
SLACK = 0.125


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)


def _holders(buf: Tensor) -> int:
    """References to the buffer's storage (tensors and views sharing it), counting
    the storage object made to read it."""
    return _USE_COUNT(buf.untyped_storage()._cdata)


class OutputPool:
    """Buffers per key (e.g. ``(kind, type, attribute)``), reused once free.

    Args:
        keep (int): buffers kept per key (batches in flight, plus the one the training
            loop holds, plus one).
    """

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._bufs: Dict[Hashable, List[Tensor]] = {}
        self._idle = 0  # the count of a buffer only the pool holds
        self.pinned = False  # new buffers in page-locked memory (batches bound for a GPU)
        self.reused = 0
        self.allocated = 0

    def empty(self, key: Hashable, rows: int, row_shape: Sequence[int],
              dtype: torch.dtype) -> Tensor:
        """An uninitialised ``(rows, *row_shape)`` tensor of ``dtype``: a view of a kept
        buffer nothing else holds, or a new one (kept for later batches)."""
        row_shape = tuple(row_shape)
        row_bytes = dtype.itemsize * int(torch.Size(row_shape).numel())
        if rows * row_bytes < MIN_BYTES or _USE_COUNT is None:  # (a torch without it)
            return empty_large((rows, *row_shape), dtype)
        bufs = self._bufs.setdefault(key, [])
        for i, buf in enumerate(bufs):
            if buf.size(0) >= rows and buf.shape[1:] == row_shape and buf.dtype == dtype \
                    and self._free(buf):
                bufs.append(bufs.pop(i))  # most recently used last
                self.reused += 1
                return buf[:rows]
        bufs[:] = [b for b in bufs if not b.is_shared()]
        shape = (rows + int(rows * SLACK), *row_shape)
        buf = torch.empty(shape, dtype=dtype, pin_memory=True) if self.pinned \
            else empty_large(shape, dtype)
        if not self._idle:
            self._idle = _holders(buf)
        if len(bufs) >= self.keep:  # a free one too small, else the oldest busy one
            free = [b for b in bufs if self._free(b)]
            gone = free[0] if free else bufs[0]
            bufs[:] = [b for b in bufs if b is not gone]  # by identity: == compares values
        bufs.append(buf)
        self.allocated += 1
        return buf[:rows]

    def _free(self, buf: Tensor) -> bool:
        return _holders(buf) == self._idle and not buf.is_shared()

    def pin(self) -> None:
        """Keeps new buffers in page-locked memory from now on (a non-blocking copy to a
        GPU then reads them directly, with no copy into pinned memory first); buffers
        kept so far are dropped. Whoever copies a buffer to a GPU holds it (and so keeps
        the pool from reusing it) until that copy has run."""
        if not self.pinned:
            self.pinned = True
            self.clear()

    def clear(self) -> None:
        """Drops every kept buffer (batches handed out keep theirs)."""
        self._bufs = {}
