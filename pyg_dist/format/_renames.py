"""Atomic renames: a folder flushed after a rename, two paths exchanged in one step, a
finished folder moved into place (the steps :func:`pyg_dist.format._files.atomic_dir`
ends with).

:func:`exchange` swaps two existing paths with Linux's ``renameat2(RENAME_EXCHANGE)``, so
a replaced folder is at every moment the previous complete one or the new one;
:func:`swap_in` falls back to moving the old folder aside (and back on failure) where the
system or file system cannot exchange. :func:`move_in_new` never replaces anything.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path
from typing import Any, Optional, Union

from pyg_dist.format import _leftovers as leftovers

__all__ = ["fsync_dir", "exchange", "swap_in", "move_in_new", "RENAME_EXCHANGE"]

PathLike = Union[str, os.PathLike]

RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _load_libc() -> Optional[Any]:
    """The C library, when it offers ``renameat2`` (Linux, glibc 2.28+); else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return libc


_LIBC = _load_libc()


def fsync_dir(folder: PathLike) -> None:
    """Flushes ``folder``'s entries (creations, renames) to disk, where the file system
    can (some refuse ``fsync`` of a folder: that is not an error)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def exchange(a: Path, b: Path) -> bool:
    """Swaps two existing paths in one atomic step (``renameat2(RENAME_EXCHANGE)``).

    Returns:
        bool: False, and nothing changed, where the system or file system cannot.

    Raises:
        OSError: if the exchange failed for another reason.
    """
    libc = _LIBC
    if libc is None:
        return False
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
                      RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def swap_in(tmp: Path, out: Path) -> None:
    """Moves the complete folder ``tmp`` to ``out``. A replaced ``out`` is exchanged
    with ``tmp`` in one step (then ``tmp`` holds it, removed by
    :func:`~pyg_dist.format._leftovers.release`), or where that cannot be done moved
    aside (:func:`~pyg_dist.format._leftovers.old_path`), and back on failure."""
    old = leftovers.old_path(tmp)
    if out.exists():
        if exchange(tmp, out):
            fsync_dir(out.parent)
            return
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except BaseException:
        if old.exists() and not out.exists():
            os.replace(old, out)
        raise
    fsync_dir(out.parent)


def move_in_new(tmp: Path, out: Path) -> None:
    """Moves the complete folder ``tmp`` to ``out``, which must still be missing or
    empty: the rename itself refuses an ``out`` another writer filled meanwhile (two
    jobs writing one folder without ``overwrite``: one of them fails, none is lost).

    Raises:
        FileExistsError: naming ``out`` when it is no longer missing or empty.
    """
    try:
        os.rename(tmp, out)  # over a folder only if it is empty; never over a file
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise
        raise FileExistsError(f"output folder {out} was created by another writer while "
                              f"this one wrote it; nothing was replaced (pass overwrite "
                              f"to replace it)") from None
    fsync_dir(out.parent)
