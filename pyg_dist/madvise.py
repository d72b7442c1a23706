"""``madvise(2)`` hints (Linux; nothing happens elsewhere). Hints only: a refused one is
harmless."""
from __future__ import annotations

import ctypes
import sys

MADV_RANDOM = 1
MADV_DONTNEED = 4
MADV_HUGEPAGE = 14
PAGE = 4096


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
