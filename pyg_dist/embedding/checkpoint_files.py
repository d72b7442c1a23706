"""The files of a checkpoint folder: versions, the ``LATEST`` pointer and shards.

::

    PATH/LATEST                  the name of the current version, e.g. "v000002-3f9c1a7e"
    PATH/<version>/t<i>_r<r>.pt  rank r's rows of tensor i: {"start", "stop", "rows"}
                                 (its digest is in the manifest, checked before loading)
    PATH/<version>/manifest.json what the version holds (see checkpoint_manifest)
    PATH/<version>/DONE          written after the manifest: the version is complete
                                 ("complete <digest of manifest.json>", checked at load)

Every save writes a new version folder and, once it is complete, replaces
``LATEST`` atomically (written under a temporary name, then ``os.replace``); older
versions are removed only after that. A crash at any point leaves ``LATEST``
naming the previous, complete version. Folders of the first release (manifest,
``DONE`` and shards directly in ``PATH``, no ``LATEST``) are still read.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.embedding.checkpoint_manifest import CheckpointError, ShardEntry, TensorEntry
from pyg_dist.format.digest import DigestMismatch, bytes_digest, check_file, file_digest

LATEST = "LATEST"
MANIFEST = "manifest.json"
DONE = "DONE"
LAYOUT_1 = ""  # the version name of a folder written by the first release
_VERSION = re.compile(r"v(\d{6,})-[0-9a-f]{8}")
_LAYOUT_1_FILE = re.compile(r"(t\d+_r\d+\.pt|\..*\.tmp)")


def shard_file(tensor: int, rank: int) -> str:
    return f"t{tensor}_r{rank}.pt"


def _fsync_dir(folder: Path) -> None:
    """Flushes ``folder``'s entries (renames) to disk, where the file system can."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):  # no fsync of folders there
            raise
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[Any], None], binary: bool = True) -> None:
    """Writes ``path`` through a temporary file (flushed to disk) and a rename.

    Args:
        path: the file to write.
        write: ``write(f)`` writes the content into the open file ``f``.
        binary: open the file in binary mode.
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def current_version(root: Path) -> Tuple[Path, str]:
    """The folder of the complete checkpoint saved last in ``root`` and its version
    name (:data:`LAYOUT_1` for a folder of the first release).

    Raises:
        CheckpointError: if there is none, or ``LATEST`` is unreadable or names a
            version that is missing or incomplete.
    """
    pointer = root / LATEST
    if _pointer_exists(pointer):
        try:
            with open(pointer, "rb") as handle:
                name = handle.read(256).decode().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{pointer}: cannot be read ({exc})") from exc
        if not _VERSION.fullmatch(name):
            raise CheckpointError(f"{pointer}: {name!r} is not a checkpoint version name")
        folder = root / name
        if not (folder / DONE).is_file() or not (folder / MANIFEST).is_file():
            raise CheckpointError(f"{pointer} names version {name}, but {folder} has no "
                                  f"{DONE} marker or {MANIFEST}")
        _check_manifest(folder)
        return folder, name
    if (root / DONE).is_file() and (root / MANIFEST).is_file():
        return root, LAYOUT_1
    raise CheckpointError(f"{root} is not a complete pyg_dist checkpoint (no {LATEST} "
                          f"pointer, nor {DONE} and {MANIFEST}): was the save interrupted?")


def _check_manifest(folder: Path) -> None:
    """Checks ``manifest.json`` against the digest ``DONE`` records (versions written
    before digests existed record none)."""
    done = folder / DONE
    try:
        if not stat.S_ISREG(os.lstat(done).st_mode):
            raise CheckpointError(f"{done}: not a regular file")
        with open(done, "rb") as handle:
            words = handle.read(256).decode("utf-8", errors="replace").split()
        if words[:1] != ["complete"] or len(words) > 2:
            raise CheckpointError(f"{done}: not a completion marker")
        if len(words) == 2:
            check_file(folder / MANIFEST, words[1])
    except (DigestMismatch, OSError) as exc:
        raise CheckpointError(str(exc) if str(folder) in str(exc) else f"{done}: {exc}") \
            from None


def new_version(root: Path) -> str:
    """Creates the folder of a new version in ``root`` (and ``root`` itself) and
    returns its name: one past the current version's number, plus a random part."""
    root.mkdir(parents=True, exist_ok=True)
    current = _pointed_to(root)
    match = _VERSION.fullmatch(current or "")
    number = int(match.group(1)) if match else 0
    name = f"v{number + 1:06d}-{uuid.uuid4().hex[:8]}"
    (root / name).mkdir()
    return name


def publish(root: Path, name: str, manifest_json: str) -> None:
    """Completes version ``name`` (manifest, then ``DONE``) and makes it current by
    replacing ``LATEST``; then removes every other version, stale temporary files
    and the files of a first-release checkpoint in ``root``."""
    folder = root / name
    atomic_write(folder / MANIFEST, lambda f: f.write(manifest_json), binary=False)
    done = f"complete {bytes_digest(manifest_json.encode())}\n"
    atomic_write(folder / DONE, lambda f: f.write(done), binary=False)
    _fsync_dir(folder)
    atomic_write(root / LATEST, lambda f: f.write(name + "\n"), binary=False)
    _fsync_dir(root)
    _remove_others(root, name)


def _remove_others(root: Path, keep: str) -> None:
    """Removes what is not part of version ``keep``; failures only warn (the new
    version is current already)."""
    for layout_1 in (DONE, MANIFEST):  # the marker first: never a half-removed complete one
        remove(root / layout_1)
    for entry in sorted(root.iterdir()):
        if entry.name != keep and (_VERSION.fullmatch(entry.name) and entry.is_dir()
                                   or _LAYOUT_1_FILE.fullmatch(entry.name) and entry.is_file()):
            remove(entry)


def remove(path: Path) -> None:
    """Removes a folder or file; failures only warn (the checkpoint is consistent)."""
    try:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        warnings.warn(f"could not remove {path} (left by an older checkpoint): {exc}")


def discard(root: Path, name: str) -> None:
    """Removes the folder of version ``name`` after a failed save (unless current)."""
    try:
        current = _pointed_to(root)
    except OSError as exc:  # unknown: keep the folder
        warnings.warn(f"kept {root / name} of a failed save: cannot read {LATEST} ({exc})")
        return
    if name != current:
        remove(root / name)


def _pointer_exists(pointer: Path) -> bool:
    """Whether ``LATEST`` exists; raises :class:`CheckpointError` naming it when it is not
    a regular file (a folder, a FIFO that would block a read, a link)."""
    if not os.path.lexists(pointer):
        return False
    if not stat.S_ISREG(os.lstat(pointer).st_mode):
        raise CheckpointError(f"{pointer}: not a regular file (a damaged checkpoint: remove it "
                              f"to start afresh)")
    return True


def _pointed_to(root: Path) -> Optional[str]:
    """What ``LATEST`` says (``None`` without one)."""
    pointer = root / LATEST
    if not _pointer_exists(pointer):
        return None
    with open(pointer, "rb") as handle:
        return handle.read(256).decode("utf-8", errors="replace").strip()


def write_shard(file: Path, start: int, stop: int, rows: Tensor) -> str:
    """Writes rows ``[start, stop)`` into ``file`` atomically; returns the file's digest."""
    obj = {"start": start, "stop": stop, "rows": rows}
    atomic_write(file, lambda f: torch.save(obj, f))
    return file_digest(file)


def read_shard(file: Path, shard: ShardEntry, entry: TensorEntry) -> Tensor:
    """The rows in ``file`` (memory-mapped), checked against the manifest.

    Raises:
        CheckpointError: naming ``file``, if it cannot be loaded with
            ``weights_only=True``, does not hold ``shard``'s rows of ``entry``, or (when
            the manifest records one) its bytes differ from the digest taken at save time.
    """
    try:
        if not stat.S_ISREG(os.lstat(file).st_mode):
            raise CheckpointError(f"{file}: not a regular file")
        if shard.digest is not None:
            check_file(file, shard.digest)
    except (DigestMismatch, OSError) as exc:
        raise CheckpointError(str(exc) if str(file) in str(exc) else f"{file}: {exc}") \
            from None
    try:
        obj: Any = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # any failure to unpickle: truncated, unsafe, not torch's
        raise CheckpointError(f"{file}: cannot be loaded as a checkpoint shard with "
                              f"weights_only=True ({_reason(exc)})") from exc
    if not isinstance(obj, dict) or not {"start", "stop", "rows"} <= set(obj):
        keys = sorted(map(str, obj)) if isinstance(obj, dict) else type(obj).__name__
        raise CheckpointError(f"{file}: expected a dict with keys 'start', 'stop' and "
                              f"'rows', got {keys}")
    start, stop, rows = obj["start"], obj["stop"], obj["rows"]
    if any(type(v) is not int for v in (start, stop)) or (start, stop) != (shard.start,
                                                                             shard.stop):
        raise CheckpointError(f"{file}: holds rows [{start!r}, {stop!r}), the manifest says "
                              f"[{shard.start}, {shard.stop})")
    expected = (stop - start, *entry.shape[1:])
    if not isinstance(rows, Tensor) or rows.dtype != entry.dtype or tuple(rows.shape) != expected:
        got = (f"{rows.dtype} rows of shape {tuple(rows.shape)}" if isinstance(rows, Tensor)
               else f"rows of type {type(rows).__name__}")
        raise CheckpointError(f"{file}: expected {entry.dtype} rows of shape {expected}, "
                              f"got {got}")
    return rows


def _reason(exc: Exception) -> str:
    """The line of a ``torch.load`` error that says what went wrong."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    unsafe = [line for line in lines if "Unsupported global" in line]
    text = (unsafe or [line for line in lines if line] or [""])[0]
    return f"{type(exc).__name__}: {text.split(' was not an allowed global')[0]}"


def missing_files(folder: Path, files: Dict[str, int]) -> Optional[str]:
    """Which of ``files`` (name -> rank that writes it) are not in ``folder``."""
    missing = [f"{name} (rank {rank})" for name, rank in files.items()
               if not (folder / name).is_file()]
    if not missing:
        return None
    return (f"{len(missing)} shard file(s) are not in {folder}: {', '.join(missing[:5])}; "
            f"is the folder on a file system every rank shares?")
