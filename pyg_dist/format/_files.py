"""The one file-system helper: atomic files, atomic folders and versioned ``LATEST`` pointers.

Everything pyg_dist writes that must never be seen half written goes through here:
partition folders, checkpoints, inference exports and the shared feature cache.

- :func:`atomic_write`: a file is written under a hidden temporary name beside it, flushed
  to disk (``fsync``), renamed into place (``os.replace``) and its folder's entry flushed
  too, so after a crash the file is either the old one or the new one, complete.
- :func:`atomic_dir`: a folder is written as a hidden temporary sibling, flushed, and
  renamed in. An existing ``out`` is exchanged with it in one step (Linux's
  ``renameat2(RENAME_EXCHANGE)``, :mod:`pyg_dist.format._renames`), so ``out`` is at
  every moment the previous complete folder or the new one; where the file system
  cannot exchange, it is moved aside and back on failure (a kill in between leaves it
  aside, and the next write of ``out`` moves it back). Leftovers of killed writers are cleaned by
  :mod:`pyg_dist.format._leftovers`.
- versioned folders: a root holds version folders named ``step<9+ digits>-<8 hex>``
  (:func:`new_version`) and a ``LATEST`` file naming the current one (:func:`write_latest`,
  :func:`read_latest`). ``LATEST`` must be a regular file naming a version folder that
  exists; anything else is a :class:`PointerError` naming it, never "no version".

The invariant of versioned folders: ``LATEST`` only ever names a complete version, and
that version stays on disk until a newer complete one is published. A writer completes a
version before it switches ``LATEST`` (one atomic rename); nothing here removes the
version ``LATEST`` names: :func:`prune` and :func:`remove_version` read ``LATEST`` again
after moving a version aside and move it back if ``LATEST`` names it meanwhile (a
concurrent switch). A version is removed by first renaming it to a hidden temporary name
(``.<version>.<hex>.tmp``) and then deleting that, so a version is never seen half
deleted under its own name. Incomplete versions and hidden leftovers of killed writers
are removed by the next :func:`prune` (the next publish).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Union

from pyg_dist.errors import PygDistError
from pyg_dist.format import _leftovers as leftovers
from pyg_dist.format._renames import fsync_dir, move_in_new, swap_in

PathLike = Union[str, os.PathLike]

LATEST = "LATEST"
VERSION_NAME = re.compile(r"step(\d{9,})-[0-9a-f]{8}")
_POINTER_BYTES = 256


class PointerError(ValueError, PygDistError):
    """A ``LATEST`` pointer is not a regular file naming a version folder."""


def temporary_name(path: Path) -> Path:
    """A hidden, unique temporary name beside ``path`` (``.NAME.<hex>.tmp``)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def replace_synced(handle: Any, tmp: PathLike, path: PathLike) -> None:
    """Flushes the open file ``handle`` (written at ``tmp``) to disk, renames ``tmp`` to
    ``path`` and flushes the folder's entry: the last step of every atomic file write."""
    handle.flush()
    os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def atomic_write(path: PathLike, write: Callable[[Any], None], binary: bool = True) -> None:
    """Writes ``path`` atomically and durably (temporary file, ``fsync``, rename, ``fsync``
    of the folder).

    Args:
        path: the file to write.
        write: ``write(f)`` writes the content into the open file ``f``.
        binary: open the file in binary mode.
    """
    path = Path(path)
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb" if binary else "w") as handle:
            write(handle)
            replace_synced(handle, tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path: PathLike, text: str) -> None:
    """Writes ``text`` into ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text), binary=False)


def write_json(path: PathLike, obj: Any) -> None:
    """Writes ``obj`` as indented JSON into ``path`` atomically."""
    write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def sync_tree(folder: Path) -> None:
    """Flushes every file and folder under ``folder`` (and it) to disk."""
    for base, _, names in os.walk(folder):
        for name in names:
            file = Path(base, name)
            if file.is_symlink() or not file.is_file():
                continue
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(base)


def prepare_folder(out: Path, overwrite: bool,
                   how: str = "overwrite=True / --overwrite") -> None:
    """Checks that a new folder may take the place of ``out``, creates its parent and
    removes leftovers of killed writes of ``out`` whose writer is provably gone.

    Args:
        out (Path): the folder to create.
        overwrite (bool): replace an existing, non-empty ``out``.
        how (str): how the caller's user passes ``overwrite``, for the message.

    Raises:
        FileExistsError: if ``out`` is not a folder, or exists, is not empty and
            ``overwrite`` is False.
        TypeError: if ``overwrite`` is not a bool (``"yes"`` would replace ``out``).
    """
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {type(overwrite).__name__} "
                        f"{overwrite!r}")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output {out} exists and is not a folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    leftovers.clean_stale(out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"output folder {out} exists and is not empty "
                              f"(pass {how} to replace it)")


@contextmanager
def atomic_dir(out: PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yields a temporary folder next to ``out``; flushes it and renames it to ``out`` on
    success.

    A crash leaves ``out`` either as it was or complete, never half written. The
    temporary folder records its writer; leftovers of killed writes of ``out`` are
    removed first when their writer is provably gone
    (:func:`~pyg_dist.format._leftovers.clean_stale`; others are kept with a warning).

    Args:
        out: the folder to create.
        overwrite: replace an existing, non-empty ``out``.

    Raises:
        FileExistsError: if ``out`` exists, is not empty and ``overwrite`` is False
            (checked first, and again by the final rename: another writer that filled
            ``out`` meanwhile is never replaced).
    """
    out = Path(out)
    prepare_folder(out, overwrite)
    tmp = leftovers.claim(out)
    try:
        yield tmp
        sync_tree(tmp)
        if overwrite:
            swap_in(tmp, out)
        else:
            move_in_new(tmp, out)
    finally:
        leftovers.release(tmp, out)


def remove(path: Path) -> None:
    """Removes a folder or file; failures only warn (used for what is no longer current)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        warnings.warn(f"could not remove {path}: {exc}")


# ---- versioned folders ----------------------------------------------------------------
def new_version(root: Path, step: int) -> str:
    """Creates a new, empty version folder for ``step`` in ``root`` (and ``root``);
    returns its name."""
    root.mkdir(parents=True, exist_ok=True)
    name = f"step{step:09d}-{uuid.uuid4().hex[:8]}"
    (root / name).mkdir()
    return name


def regular_file(file: Path) -> os.stat_result:
    """``lstat`` of ``file``; raises :class:`PointerError` naming it unless it is a regular
    file (a folder, FIFO, device or link is refused before anything reads it)."""
    try:
        info = os.lstat(file)
    except OSError as exc:
        raise PointerError(f"{file}: missing or unreadable ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise PointerError(f"{file}: not a regular file")
    return info


def has_latest(root: Path) -> bool:
    """Whether ``root/LATEST`` exists; raises :class:`PointerError` naming it when it
    exists but is not a regular file (e.g. a folder or a FIFO that would block a read)."""
    pointer = root / LATEST
    if not os.path.lexists(pointer):
        return False
    regular_file(pointer)
    return True


def read_latest(root: Path, complete: Callable[[Path], bool] = Path.is_dir) -> Optional[str]:
    """The version ``root/LATEST`` names; ``None`` when there is none yet (no ``root`` or
    no ``LATEST`` in it).

    Args:
        root: the folder of versions.
        complete: ``complete(folder)`` tells whether a version folder is complete.

    Raises:
        PointerError: naming ``root`` or ``LATEST`` when ``root`` is not a folder, or
            ``LATEST`` is not a regular file naming a complete version of ``root``.
    """
    if not os.path.lexists(root):
        return None
    if not root.is_dir():
        raise PointerError(f"{root} is not a folder")
    if not has_latest(root):
        return None
    pointer = root / LATEST
    try:
        with open(pointer, "rb") as handle:
            name = handle.read(_POINTER_BYTES).decode("utf-8", errors="replace").strip()
    except OSError as exc:
        raise PointerError(f"{pointer}: cannot be read ({exc.strerror})") from None
    if not VERSION_NAME.fullmatch(name) or not complete(root / name):
        raise PointerError(f"{pointer} names {name[:80]!r}, which is not a complete version "
                           f"in {root}")
    return name


def pointer_name(root: Path) -> Optional[str]:
    """What ``root/LATEST`` says (stripped, unchecked), or ``None`` when there is no
    readable regular ``LATEST``."""
    try:
        regular_file(root / LATEST)
        with open(root / LATEST, "rb") as handle:
            return handle.read(_POINTER_BYTES).decode("utf-8", errors="replace").strip()
    except (OSError, PointerError):
        return None


def write_latest(root: Path, name: str) -> None:
    """Makes version ``name`` of ``root`` the current one (atomically replaces ``LATEST``)."""
    if not VERSION_NAME.fullmatch(name) or not (root / name).is_dir():
        raise ValueError(f"{name!r} is not a version folder of {root}")
    write_text(root / LATEST, name + "\n")


def versions(root: Path) -> List[Path]:
    """The version folders of ``root``, oldest (lowest step) first."""
    found = [p for p in root.iterdir() if VERSION_NAME.fullmatch(p.name) and p.is_dir()
             and not p.is_symlink()]
    return sorted(found, key=lambda p: (int(VERSION_NAME.fullmatch(p.name).group(1)),
                                        p.stat().st_mtime))


def remove_version(root: Path, name: str) -> bool:
    """Removes version ``name`` of ``root`` unless ``LATEST`` names it: renames it aside to
    a hidden temporary name first (so it is never half deleted under its name), reads
    ``LATEST`` again and moves it back if ``LATEST`` names it now (a concurrent switch).
    Failures to delete only warn (:func:`prune` removes the hidden leftover later).

    Returns:
        whether the version is gone.
    """
    if pointer_name(root) == name:
        return False
    aside = temporary_name(root / name)
    try:
        os.replace(root / name, aside)
    except FileNotFoundError:
        return True
    if pointer_name(root) == name:  # switched meanwhile: it stays
        os.replace(aside, root / name)
        return False
    fsync_dir(root)
    remove(aside)
    return True


def prune(root: Path, current: str, keep: int, complete: Callable[[Path], bool],
          previous: Optional[str] = None) -> None:
    """Keeps ``current`` and ``keep - 1`` other complete versions of ``root`` (``previous``,
    the one ``LATEST`` named before ``current``, first, then the newest); removes the rest
    (also incomplete ones, left by killed writes) and hidden leftovers. Never removes the
    version ``LATEST`` names (see :func:`remove_version`); failures to delete only warn:
    ``current`` is published already.

    Args:
        root: the folder of versions.
        current: the version just published.
        keep: complete versions to keep, ``current`` included.
        complete: ``complete(folder)`` tells whether a version folder is complete.
        previous: the version ``LATEST`` named before ``current``, kept first.
    """
    others = [p for p in versions(root) if p.name != current]
    done = [p for p in others if complete(p)]
    broken = [p for p in others if not complete(p)]
    slots = max(0, keep - 1)
    first = [p for p in done if p.name == previous][:slots]
    rest = [p for p in done if p.name != previous]  # oldest first
    kept = first + rest[len(rest) - (slots - len(first)):] if slots > len(first) else first
    for old in [p for p in done if p not in kept] + broken:
        remove_version(root, old.name)
    for stale in root.glob(".*.tmp"):
        remove(stale)
