"""The file a machine's processes share a feature cache through, and its locks.

A ``.pt`` file (``torch.save``; read with ``weights_only=True`` and mapped): ``format``,
``version``, ``ids`` (per node type, sorted global ids), ``rows`` (per node type and
attribute, one row per id) and ``digest``, a content digest of ids and rows
(:func:`payload_digest`, :mod:`pyg_dist.format._digest`) checked when a process adopts
the file, so bytes edited in place (mtime restored or not) are refused.

Written under a random name, ``0600``. Every file a cleaner (:func:`clean_stale`, of any
job on the machine) may remove is locked from the instant it has a name the cleaner
matches: the writer creates it under a name no cleaner matches (``NEW_PREFIX``), takes
its shared ``flock``, and only then renames it to the temporary name and, once written,
to its final name (:func:`pyg_dist.format._files.replace_synced`). Every process mapping
it holds a shared ``flock`` too, and the last to let go removes it (see :func:`holder`).
"""
from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import torch
from torch import Tensor

from pyg_dist.errors import PygDistError
from pyg_dist.format import _files as files
from pyg_dist.format._digest import bytes_digest
from pyg_dist.sampler._cache.feature_cache import FeatureCache
from pyg_dist.store._source import FileId
from pyg_dist._typing import NodeType

log = logging.getLogger("pyg_dist")

PREFIX = "pyg_dist-cache-"
#: names of files being created, before their lock is taken: never matched by PREFIX
NEW_PREFIX = ".pyg_dist-new-"
#: an unlocked NEW_PREFIX file older than this was left by a writer killed between
#: creating and locking it (microseconds); only then may a cleaner remove it
NEW_GRACE_S = 600.0
FORMAT, VERSION = "pyg_dist feature cache", 2


class SharedCacheError(RuntimeError, PygDistError):
    """A shared cache file is missing, changed or not what it must be."""


def write(cache: FeatureCache, folder: Path) -> Tuple[str, int]:
    """Writes ``cache`` into ``folder``; returns its path and a descriptor holding its
    shared lock (the caller owns it: see :func:`holder`).

    Raises:
        OSError: the folder is missing or lacks the room (checked before writing).
    """
    clean_stale(folder)
    need = cache.nbytes + sum(i.numel() * 8 for i in cache.ids.values()) + (1 << 20)
    st = os.statvfs(folder)
    if st.f_bavail * st.f_frsize < need:
        raise OSError(28, f"needs {need / 1e6:.1f} MB, {st.f_bavail * st.f_frsize / 1e6:.1f} "
                          f"MB free (set PYG_DIST_CACHE_DIR to a larger memory-backed folder)")
    token = uuid.uuid4().hex
    new, tmp, path = (folder / f"{NEW_PREFIX}{token}", folder / f".{PREFIX}{token}.pt.tmp",
                      folder / f"{PREFIX}{token}.pt")
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # before any cleaner can match its name
        os.rename(new, tmp)
        with open(fd, "wb", closefd=False) as f:
            torch.save({"format": FORMAT, "version": VERSION, "ids": cache.ids,
                        "rows": cache.rows, "digest": payload_digest(cache.ids, cache.rows)},
                       f)
            files.replace_synced(f, tmp, path)
    except BaseException:
        os.close(fd)
        for leftover in (new, tmp):
            leftover.unlink(missing_ok=True)
        raise
    return str(path), fd


def payload_digest(ids: Dict[NodeType, Tensor], rows: Dict[NodeType, Dict[str, Tensor]]
                   ) -> str:
    """The digest of a cache's contents: of every id and row tensor's bytes, in sorted
    order of node type and attribute, with their names, dtypes and shapes.

    Args:
        ids: per node type, the cached ids.
        rows: per node type and attribute, their rows.
    """
    parts = []
    for node_type in sorted(ids):
        named = [("ids", ids[node_type])] + sorted(rows.get(node_type, {}).items())
        for name, t in named:
            data = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
            parts.append(f"{node_type}/{name}:{t.dtype}:{tuple(t.shape)}:"
                         f"{bytes_digest(memoryview(data))}")
    return bytes_digest("\n".join(parts).encode())


def holder(fd: int, file: FileId) -> Callable[[], None]:
    """A function that lets go of this process's lock on ``file`` (held by ``fd``) and
    removes the file when no other process holds one. A forked child inheriting ``fd``
    only closes it."""
    owner = os.getpid()

    def release() -> None:
        try:
            if os.getpid() != owner:
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # others still map it
            if _same(fd, file.path):
                os.unlink(file.path)
        finally:
            os.close(fd)
    return release


def _same(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def clean_stale(folder: Path) -> int:
    """Removes this user's cache files (and unfinished writes) that no process holds:
    left by killed jobs. Returns how many. Files still being created (``NEW_PREFIX``,
    not locked yet) are left alone unless older than ``NEW_GRACE_S``."""
    removed = 0
    new = [p for p in folder.glob(f"{NEW_PREFIX}*") if _older(p, NEW_GRACE_S)]
    for path in list(folder.glob(f"{PREFIX}*")) + list(folder.glob(f".{PREFIX}*")) + new:
        removed += _remove_unheld(path)
    if removed:
        log.info("pyg_dist: removed %d feature cache file(s) of ended jobs from %s", removed,
                 folder)
    return removed


def _older(path: Path, seconds: float) -> bool:
    try:
        return time.time() - os.stat(path, follow_symlinks=False).st_mtime > seconds
    except OSError:
        return False


def _remove_unheld(path: Path) -> int:
    """Removes ``path`` (1) if it is this user's regular file and no process holds it."""
    try:
        st = os.stat(path, follow_symlinks=False)
        if not path.is_file() or path.is_symlink() or st.st_uid != os.geteuid():
            return 0
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _same(fd, str(path)):
            os.unlink(path)
            return 1
    except BlockingIOError:
        pass  # in use
    finally:
        os.close(fd)
    return 0


def check_payload(payload: Any, fetcher: Any, path: str
                  ) -> Tuple[Dict[NodeType, Tensor], Dict[NodeType, Dict[str, Tensor]]]:
    """``(ids, rows)`` of a loaded cache file after checking them against this graph:
    known node types, sorted remote ids in range, every attribute the fetcher reads
    with one row per id of the stored shape and dtype."""
    def bad(why: str) -> SharedCacheError:
        return SharedCacheError(f"shared feature cache {path}: {why}")

    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise bad("not a pyg_dist feature cache file")
    if payload.get("version") != VERSION:
        raise bad(f"version {payload.get('version')!r}, this pyg_dist reads {VERSION}")
    ids, rows = payload.get("ids"), payload.get("rows")
    if not isinstance(ids, dict) or not isinstance(rows, dict) or set(ids) != set(rows):
        raise bad("'ids' and 'rows' must be dicts over the same node types")
    meta, part = fetcher.meta, fetcher.group.part
    for node_type, t in ids.items():
        if node_type not in meta.node_types or not fetcher.node_attrs.get(node_type):
            raise bad(f"node type {node_type!r} is not one this graph's features hold")
        if not isinstance(t, Tensor) or t.dtype != torch.int64 or t.dim() != 1:
            raise bad(f"ids of '{node_type}' must be a 1-D int64 tensor")
        n, book = meta.num_nodes[node_type], meta.node_book(node_type)
        if t.numel() and (int(t[0]) < 0 or int(t[-1]) >= n or bool((t[1:] <= t[:-1]).any())
                          or bool(book.owns(part, t).any())):
            raise bad(f"ids of '{node_type}' must be sorted, unique, in [0, {n}) and "
                      f"owned by other partitions")
        _check_rows(rows[node_type], fetcher, node_type, t.numel(), bad)
    return ids, rows


def check_digest(payload: Dict[str, Any], ids: Dict[NodeType, Tensor],
                 rows: Dict[NodeType, Dict[str, Tensor]], path: str) -> None:
    """Checks checked ``(ids, rows)`` of a loaded cache file against the digest its
    writer recorded (reads every byte once: call when adopting a file, not per read).

    Raises:
        SharedCacheError: naming ``path``, when the digest is missing or differs.
    """
    recorded = payload.get("digest")
    if not isinstance(recorded, str):
        raise SharedCacheError(f"shared feature cache {path}: no content digest recorded")
    found = payload_digest(ids, rows)
    if found != recorded:
        raise SharedCacheError(
            f"shared feature cache {path}: contents differ from the digest recorded when it "
            f"was written (edited in place or damaged); expected {recorded}, found {found}")


def _check_rows(attrs: Any, fetcher: Any, node_type: NodeType, count: int,
                bad: Callable[[str], SharedCacheError]) -> None:
    want = set(fetcher.node_attrs[node_type])
    if not isinstance(attrs, dict) or set(attrs) != want:
        raise bad(f"rows of '{node_type}' must hold exactly the attributes {sorted(want)}")
    for attr, value in attrs.items():
        shape, dtype = fetcher.node_layout(node_type, attr)
        if not isinstance(value, Tensor) or value.dtype != dtype or \
                tuple(value.shape) != (count, *shape):
            raise bad(f"'{attr}' of '{node_type}' must be {dtype} of shape "
                      f"{(count, *shape)}, got "
                      f"{getattr(value, 'dtype', type(value).__name__)} "
                      f"{tuple(getattr(value, 'shape', ()))}")
