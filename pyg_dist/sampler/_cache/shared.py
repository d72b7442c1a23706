"""One copy of the feature cache per machine, whatever its number of trainers.

Trainers on one machine that serve the same partition with the same cache options
choose the same rows (:func:`pyg_dist.sampler._cache.feature_cache.choose` depends only on those). The
first of them to claim the cache in the job's store (keys of the current incarnation)
fetches the rows once and writes them to a file in a memory-backed folder
(``PYG_DIST_CACHE_DIR``, default ``/dev/shm``); the others, and the sampler workers of
all of them, map that file. A machine then holds one cache per partition it serves, not
one per trainer and worker process. Every process checks what it maps: the same file
(device, inode, size, time), a sound layout, contents matching the digest its writer
recorded (checked once, when the file is adopted), and (trainers) exactly the ids it
would have cached itself.

Lifetime: every process that maps the file holds a shared ``flock`` on it from the
moment it exists; the last one to let go (:meth:`FeatureCache.close`, garbage
collection or exit) removes it. Files of killed jobs hold no lock and are removed by
the next build on the machine. Where the folder lacks the room, or with
``PYG_DIST_SHARED_CACHE=0``, every process keeps a private cache as before.
"""
from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import logging
import os
import tempfile
import weakref
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.sampler._cache.feature_cache import Budget, FeatureCache
from pyg_dist.sampler._cache.file import (SharedCacheError, check_digest, check_payload,
                                         holder, write)
from pyg_dist.sampler._direct import machine_id
from pyg_dist.store._source import FileId
from pyg_dist._typing import NodeType

log = logging.getLogger("pyg_dist")

DIR_ENV = "PYG_DIST_CACHE_DIR"
SHARE_ENV = "PYG_DIST_SHARED_CACHE"
_builds = itertools.count()  # the n-th cache of this process (same order on every rank)


def enabled() -> bool:
    """Whether trainers on a machine share one cache file (``PYG_DIST_SHARED_CACHE``)."""
    return os.environ.get(SHARE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """Where shared cache files live: ``PYG_DIST_CACHE_DIR``, else ``/dev/shm`` (memory,
    not disk), else the temporary folder."""
    chosen = os.environ.get(DIR_ENV)
    if chosen:
        return Path(chosen)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


# ---- building or joining -----------------------------------------------------------
def build(fetcher: Any, budget: Budget, skip: Tuple[int, ...]) -> Optional[FeatureCache]:
    """This trainer's cache: built here and shared, mapped from the file a peer on this
    machine built, or private (sharing off, or no store to meet in)."""
    group = fetcher.group
    if not enabled() or not group.ctx.is_distributed:
        return fetcher.build_cache(budget, skip)
    from pyg_dist.rpc._stores import job_store

    store = job_store(group.ctx)
    key = _key(fetcher, budget, skip, next(_builds))
    chosen, row_bytes = fetcher.cache_plan(budget, skip)
    if store.add(f"{key}/claims", 1) == 1:
        store.set(f"{key}/builder", str(group.rank))
        return _build_here(fetcher, store, key, chosen, row_bytes)
    return _join(fetcher, store, key, chosen, row_bytes)


def _key(fetcher: Any, budget: Budget, skip: Tuple[int, ...], number: int) -> str:
    """Equal exactly for the processes of one machine whose caches hold the same rows."""
    group = fetcher.group
    what = json.dumps([machine_id(), group.name, fetcher.meta.uid, group.part, repr(budget),
                       list(skip), number,
                       {t: list(a) for t, a in sorted(fetcher.node_attrs.items())}])
    return "pyg_dist/feature_cache/" + hashlib.sha1(what.encode()).hexdigest()[:20]


def _build_here(fetcher: Any, store: Any, key: str, chosen: Dict[NodeType, Tensor],
                row_bytes: Dict[NodeType, int]) -> Optional[FeatureCache]:
    try:
        if not chosen:
            store.set(f"{key}/file", json.dumps({"empty": True}))
            return None
        private = fetcher.fetch_cache(chosen, row_bytes)
        try:
            path, fd = write(private, cache_dir())
        except OSError as exc:  # no room (or no folder): everyone keeps its own
            reason = f"{cache_dir()}: {exc.strerror or exc}"
            log.warning("pyg_dist: feature cache of %.1f MB not shared (%s); each process "
                        "on this machine keeps its own copy", private.nbytes / 1e6, reason)
            store.set(f"{key}/file", json.dumps({"private": reason}))
            return private
        file = FileId.of(path)
        store.set(f"{key}/file", json.dumps({"file": asdict(file)}))
        return _open(fetcher, file, fd, row_bytes, verify=False)  # digested as written
    except BaseException as exc:
        store.set(f"{key}/file", json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        raise


def _builder(store: Any, key: str) -> str:
    return store.get(f"{key}/builder").decode() if store.check([f"{key}/builder"]) else "?"


def _join(fetcher: Any, store: Any, key: str, chosen: Dict[NodeType, Tensor],
          row_bytes: Dict[NodeType, int]) -> Optional[FeatureCache]:
    nbytes = sum(ids.numel() * row_bytes[t] for t, ids in chosen.items())
    timeout = fetcher.group.ctx.rpc_timeout + nbytes / 10e6  # the builder fetches it all
    try:
        store.wait([f"{key}/file"], timedelta(seconds=timeout))
    except Exception as exc:  # a store timeout: name who was building
        raise SharedCacheError(
            f"rank {_builder(store, key)}, building the feature cache this machine shares, published "
            f"nothing within {timeout:.0f} s (lost or stalled?): {exc}") from None
    answer = json.loads(store.get(f"{key}/file"))
    if "error" in answer:
        raise SharedCacheError(f"rank {_builder(store, key)} failed to build the feature cache this "
                               f"machine shares: {answer['error']}")
    if "empty" in answer or not chosen:
        return None
    if "private" in answer:
        return fetcher.fetch_cache(chosen, row_bytes)
    file = FileId(**answer["file"])
    try:
        cache = attach(fetcher, file, row_bytes)
    except FileNotFoundError:  # every earlier user let go before this one came
        log.info("pyg_dist: shared feature cache %s is gone; fetching a private one", file.path)
        return fetcher.fetch_cache(chosen, row_bytes)
    if set(cache.ids) != set(chosen) or \
            not all(torch.equal(cache.ids[t], ids) for t, ids in chosen.items()):
        cache.close()
        raise SharedCacheError(f"shared feature cache {file.path} holds other rows than "
                               f"this rank would cache")
    return cache


def attach(fetcher: Any, file: FileId, row_bytes: Optional[Dict[NodeType, int]] = None
           ) -> FeatureCache:
    """Maps the shared cache ``file`` (as a peer or this process's trainer published it)
    after checking it is that very file and holds rows of this graph's layout.

    Raises:
        FileNotFoundError: the file is gone.
        SharedCacheError: it was replaced, holds something else, or its contents differ
            from the digest recorded when it was written (naming the file).
    """
    fd = os.open(file.path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != \
                (file.dev, file.ino, file.size, file.mtime_ns):
            raise SharedCacheError(f"shared feature cache {file.path} changed since it was "
                                   f"published")
    except BaseException:
        os.close(fd)
        raise
    if row_bytes is None:
        row_bytes = {t: fetcher._bytes_per_row("nodes", t, a)
                     for t, a in fetcher.node_attrs.items() if a}
    return _open(fetcher, file, fd, row_bytes)


def _open(fetcher: Any, file: FileId, fd: int, row_bytes: Dict[NodeType, int],
          verify: bool = True) -> FeatureCache:
    """The cache mapped from ``file``; ``fd`` holds its shared lock from now on. With
    ``verify``, its contents are checked against the digest its writer recorded."""
    release = holder(fd, file)
    try:
        payload = torch.load(file.path, map_location="cpu", weights_only=True, mmap=True)
        ids, rows = check_payload(payload, fetcher, file.path)
        if verify:
            check_digest(payload, ids, rows, file.path)
    except BaseException:
        release()
        raise
    cache = FeatureCache(ids, rows, {t: row_bytes[t] for t in ids}, file=file)
    cache._release = weakref.finalize(cache, release)
    return cache
