"""Where the files of a chunked graph folder may be, and what they may be.

A chunked folder is untrusted input. Its ``metadata.json`` lists chunk files; by default
each must be a relative path that stays inside the folder once resolved (``..`` and
symbolic links included). DGL's format also allows absolute paths and paths leaving the
folder: they are read only when the caller passes ``allow_external_paths=True``
(``--allow-external-paths`` on the command line). Whatever the paths, only regular
files are read: their type is checked with ``os.stat`` before anything opens them, so a
FIFO is never opened (it would block) and a device, a directory or a socket is refused
by name. Messages name paths, never file contents.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from pyg_dist.chunked._errors import ChunkedFormatError

#: how a refusal tells users to opt in to paths outside the folder
EXTERNAL_HINT = "pass --allow-external-paths (in Python: allow_external_paths=True) to " \
                "read files outside the folder"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def is_inside(path: Path, root: Path) -> bool:
    """Whether ``path``, with every symbolic link resolved, is ``root`` or lies in it."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    return os.path.commonpath([real_root, real]) == real_root


def chunk_path(root: Path, text: str, where: str, allow_external: bool) -> Path:
    """The path of one chunk file listed in ``metadata.json``.

    Args:
        root (Path): the folder holding ``metadata.json``.
        text (str): the path as listed.
        where (str): how errors name the listing (``metadata.json`` and the field).
        allow_external (bool): accept absolute paths and paths resolving outside ``root``.

    Raises:
        ChunkedFormatError: an empty path, or (without ``allow_external``) an absolute one
            or one resolving outside ``root``.
    """
    if not text or "\x00" in text:
        raise ChunkedFormatError(f"{where}: chunk path {text!r} is empty or holds a NUL "
                                 f"character")
    path = Path(text)
    if path.is_absolute():
        if not allow_external:
            raise ChunkedFormatError(f"{where}: chunk path {text!r} is absolute; chunk paths "
                                     f"must be relative to {root} ({EXTERNAL_HINT})")
        return path
    joined = root / path
    if not allow_external and not is_inside(joined, root):
        raise ChunkedFormatError(f"{where}: chunk path {text!r} leads outside {root} (it "
                                 f"resolves to {os.path.realpath(joined)}; {EXTERNAL_HINT})")
    return joined


def regular_file_size(path: Path, what: str = "chunk file",
                      missing: str = " (listed in metadata.json)") -> int:
    """The size of ``path`` in bytes, after checking with ``os.stat`` (which opens
    nothing) that it is a regular file.

    Args:
        path (Path): the file.
        what (str): how the message names it.
        missing (str): appended to the message when it does not exist.

    Raises:
        ChunkedFormatError: ``path`` is missing, unreadable, or not a regular file.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ChunkedFormatError(f"{what} {path} is missing{missing}") from None
    except OSError as exc:
        raise ChunkedFormatError(f"{what} {path} cannot be examined: {exc.strerror}"
                                 ) from None
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
        raise ChunkedFormatError(f"{what} {path} is {kind}, not a regular file; chunked "
                                 f"folders hold regular files only")
    return int(info.st_size)
