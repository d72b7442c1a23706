"""Content digests of files: one helper for partitions, cache files and checkpoints.

A digest is BLAKE2b with a 16-byte output over a file's bytes, written as
``"blake2b-128:<32 hex digits>"`` so that another algorithm can be recognised later.
It guards against bit rot, partial copies and bytes edited in place (a check of sizes
or of an mtime misses those); it is not a signature: whoever can rewrite a file can
rewrite the digest recorded beside it too.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Union

from pyg_dist.errors import PygDistError

__all__ = ["ALGORITHM", "DigestMismatch", "file_digest", "bytes_digest", "check_file"]

ALGORITHM = "blake2b-128"
_BLOCK = 1 << 20


class DigestMismatch(ValueError, PygDistError):
    """A file's bytes differ from the digest recorded when it was written."""


def _hasher() -> "hashlib._Hash":
    return hashlib.blake2b(digest_size=16)


def bytes_digest(data: Union[bytes, bytearray, memoryview]) -> str:
    """The digest of ``data`` (for contents held in memory before they are written)."""
    hasher = _hasher()
    hasher.update(data)
    return f"{ALGORITHM}:{hasher.hexdigest()}"


def file_digest(path: Union[str, os.PathLike]) -> str:
    """The digest of the file at ``path``, read in 1 MiB blocks (no whole-file buffer)."""
    hasher = _hasher()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            hasher.update(block)
    return f"{ALGORITHM}:{hasher.hexdigest()}"


def check_file(path: Union[str, os.PathLike], expected: str) -> None:
    """Raises :class:`DigestMismatch` naming ``path`` if its bytes do not match ``expected``.

    Args:
        path: the file to check.
        expected: the digest recorded when it was written (``"blake2b-128:<hex>"``).
    """
    if not isinstance(expected, str) or not expected.startswith(ALGORITHM + ":"):
        raise DigestMismatch(f"{path}: recorded digest {expected!r} is not a "
                             f"{ALGORITHM} digest")
    found = file_digest(path)
    if found != expected:
        raise DigestMismatch(f"{Path(path)}: contents differ from the digest recorded when "
                             f"it was written (bit rot, a partial copy or an edit in place); "
                             f"expected {expected}, found {found}")
