"""``madvise(2)`` hints (Linux; nothing happens elsewhere), large buffers backed by
huge pages, and glibc's ``mallopt(3)`` for processes that sample. Hints only: a
refused one is harmless."""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

MADV_RANDOM = 1
MADV_DONTNEED = 4
MADV_HUGEPAGE = 14
PAGE = 4096
_HUGE_MIN_BYTES = 4 << 20


def _libc_madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _libc_madvise()

#: ``mallopt(3)`` parameters (glibc)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_ENV = "PYG_DIST_MALLOC_KEEP_MB"
DEFAULT_KEEP_MB = 64
_kept = {"mb": None}


def _libc_mallopt():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def keep_freed_memory() -> int:
    """Lets malloc reuse freed blocks of up to ``PYG_DIST_MALLOC_KEEP_MB`` (default 64)
    megabytes instead of handing them back to the kernel; returns the megabytes kept
    (0: unchanged, because 0 was asked or the C library is not glibc).

    By default glibc hands large freed blocks back (unmapped, or trimmed off the heap),
    so each hop's and each batch's arrays (positions, neighbours, ids, rows) land on
    fresh pages that fault in and are zeroed by the kernel again: the sampling
    benchmark's last hop (150k seeds, fan-out 5) took 13 ms instead of 8. Kept
    blocks are reused at once. The price: a process may hold up to that much freed
    memory, so it is set only in processes that sample (``DistNeighborSampler``), and
    blocks above it are still returned. Idempotent; the setting cannot be undone.
    """
    raw = os.environ.get(KEEP_ENV, str(DEFAULT_KEEP_MB)).strip()
    try:
        mb = int(raw)
        if not 0 <= mb <= 2047:
            raise ValueError
    except ValueError:
        raise ValueError(f"{KEEP_ENV}={raw!r}: expected megabytes between 0 and 2047 "
                         f"(0 leaves malloc's defaults)") from None
    if mb == 0 or _kept["mb"] == mb:
        return _kept["mb"] or 0
    fn = _libc_mallopt()
    if fn is None or not (fn(M_MMAP_THRESHOLD, mb << 20) and fn(M_TRIM_THRESHOLD, mb << 20)):
        return 0
    _kept["mb"] = mb
    return mb


def advise(ptr: int, nbytes: int, advice: int, inward: bool = True) -> bool:
    """Gives ``advice`` for the pages of ``[ptr, ptr + nbytes)``: only the whole pages
    inside it (``inward``, for memory shared with other data) or every page it touches.
    Returns whether the kernel took it."""
    if _MADVISE is None or nbytes <= 0:
        return False
    if inward:
        start, end = (ptr + PAGE - 1) & ~(PAGE - 1), (ptr + nbytes) & ~(PAGE - 1)
    else:
        start, end = ptr & ~(PAGE - 1), (ptr + nbytes + PAGE - 1) & ~(PAGE - 1)
    return end > start and _MADVISE(start, end - start, advice) == 0


def advise_huge_pages(ptr: int, nbytes: int) -> None:
    """Asks Linux to back ``[ptr, ptr + nbytes)`` with transparent huge pages.

    Large buffers are freshly mapped by the allocator, and faulting them in 4 KiB at
    a time dominates filling them (by ~8x on virtual machines). A hint only: call it
    before the memory is first touched; nothing happens elsewhere, on small buffers,
    or where transparent huge pages are disabled.
    """
    if nbytes >= _HUGE_MIN_BYTES:
        advise(ptr, nbytes, MADV_HUGEPAGE)


def empty_large(shape: Sequence[int], dtype: torch.dtype) -> Tensor:
    """``torch.empty`` for large outputs, backed by huge pages where possible."""
    out = torch.empty(tuple(shape), dtype=dtype)
    advise_huge_pages(out.data_ptr(), out.numel() * out.element_size())
    return out


def full_large(size: int, value: int, dtype: type = np.int64) -> np.ndarray:
    """``np.full`` for large arrays, backed by huge pages where possible."""
    out = np.empty(size, dtype=dtype)
    advise_huge_pages(out.ctypes.data, out.nbytes)
    out.fill(value)
    return out
