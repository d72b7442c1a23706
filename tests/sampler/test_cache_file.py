"""The file a machine's processes share a feature cache through: what it must hold
to be used, and who removes it (the last process holding its lock, or the next build
when every holder is gone), also while builders and cleaners of other jobs race."""
import asyncio
import fcntl
import multiprocessing
import os
import time
from pathlib import Path

import pytest
import torch

from pyg_dist.sampler._cache.feature_cache import FeatureCache
from pyg_dist.sampler._cache.file import (NEW_GRACE_S, NEW_PREFIX, SharedCacheError,
                                         check_payload, clean_stale, holder, write)
from pyg_dist.sampler import FeatureFetcher
from pyg_dist.sampler._cache.shared import attach
from pyg_dist.store._source import FileId


@pytest.fixture
def fetcher(hetero_parted):
    return FeatureFetcher(hetero_parted.group(0), hetero_parted.samplers[0], hetero_parted.meta)


def _cache(fetcher) -> FeatureCache:
    meta = fetcher.meta
    chosen = {}
    for t in meta.node_types:
        book = meta.node_book(t)
        chosen[t] = torch.arange(book.start(1), book.start(1) + min(book.size(1), 7))
    rows = asyncio.run(fetcher.fetch(chosen, {}, unique=False, wire=False)).nodes
    return FeatureCache(chosen, rows, {t: 1 for t in chosen})


def _load(path):
    return torch.load(path, weights_only=True, mmap=True)


def test_written_file_loads_and_checks(fetcher, tmp_path):
    cache = _cache(fetcher)
    path, fd = write(cache, tmp_path)
    try:
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        ids, rows = check_payload(_load(path), fetcher, path)
        for t in cache.ids:
            assert torch.equal(ids[t], cache.ids[t])
            assert all(torch.equal(rows[t][a], cache.rows[t][a]) for a in cache.rows[t])
        assert not list(tmp_path.glob(".pyg_dist-cache-*"))  # no temporary left
    finally:
        os.close(fd)


def _tampered(fetcher, tmp_path, change):
    cache = _cache(fetcher)
    path, fd = write(cache, tmp_path)
    os.close(fd)
    payload = dict(_load(path))
    payload["ids"], payload["rows"] = dict(payload["ids"]), {
        t: dict(a) for t, a in payload["rows"].items()}
    change(payload, fetcher.meta.node_types[0])
    return payload, path


@pytest.mark.parametrize("change,match", [
    (lambda p, t: p.update(format="other"), "not a pyg_dist feature cache"),
    (lambda p, t: p.update(version=99), "version 99"),
    (lambda p, t: p["ids"].update({t: p["ids"][t].flip(0)}), "sorted, unique"),
    (lambda p, t: p["ids"].update({t: p["ids"][t] * 0}), "sorted, unique"),  # owned ids
    (lambda p, t: p["ids"].update({t: p["ids"][t].int()}), "int64"),
    (lambda p, t: p["ids"].update({"nope": p["ids"][t]}), "same node types"),
    (lambda p, t: p["rows"][t].update(x=p["rows"][t]["x"][:-1]), "of shape"),
    (lambda p, t: p["rows"][t].update(x=p["rows"][t]["x"].double()), "float32"),
    (lambda p, t: p["rows"][t].pop("x"), "exactly the attributes"),
])
def test_a_file_of_another_content_is_refused(fetcher, tmp_path, change, match):
    payload, path = _tampered(fetcher, tmp_path, change)
    with pytest.raises(SharedCacheError, match=match) as info:
        check_payload(payload, fetcher, path)
    assert path in str(info.value)


def test_no_room_is_an_os_error_before_writing(fetcher, tmp_path, monkeypatch):
    real = os.statvfs

    class Tiny:
        def __init__(self, st):
            self.f_frsize, self.f_bavail = st.f_frsize, 1

    monkeypatch.setattr(os, "statvfs", lambda p: Tiny(real(p)))
    with pytest.raises(OSError, match="MB free"):
        write(_cache(fetcher), tmp_path)
    assert not list(tmp_path.iterdir())


def test_last_holder_removes_the_file(fetcher, tmp_path):
    path, fd = write(_cache(fetcher), tmp_path)
    file = FileId.of(path)
    other = os.open(path, os.O_RDONLY)  # a second process's hold, as another description
    fcntl.flock(other, fcntl.LOCK_SH)
    holder(fd, file)()
    assert os.path.exists(path)  # still held by the other
    holder(other, file)()
    assert not os.path.exists(path)


def test_stale_files_go_and_held_ones_stay(fetcher, tmp_path):
    held, fd = write(_cache(fetcher), tmp_path)
    stale, fd2 = write(_cache(fetcher), tmp_path)
    os.close(fd2)  # its writer is gone: nobody holds it
    unfinished = tmp_path / ".pyg_dist-cache-dead.pt.tmp"
    unfinished.write_bytes(b"partial")
    other = tmp_path / "unrelated.pt"
    other.write_bytes(b"x")
    assert clean_stale(tmp_path) == 2
    assert os.path.exists(held) and not os.path.exists(stale)
    assert not unfinished.exists() and other.exists()
    os.close(fd)


def test_stale_unfinished_creations_go_only_after_the_grace(tmp_path):
    young, old = tmp_path / f"{NEW_PREFIX}young", tmp_path / f"{NEW_PREFIX}old"
    young.write_bytes(b"")
    old.write_bytes(b"")
    past = time.time() - NEW_GRACE_S - 10
    os.utime(old, (past, past))
    assert clean_stale(tmp_path) == 1
    assert young.exists() and not old.exists()


def test_a_cleaner_in_the_creation_window_removes_nothing(tmp_path, monkeypatch):
    """Another job's cleaner runs right after the writer created its file and before it
    took its lock: it must not see (and remove) that file."""
    real, ran = fcntl.flock, []

    def flock(fd, op):
        if op == fcntl.LOCK_SH and not ran:  # the writer's own lock: a cleaner first
            ran.append(clean_stale(tmp_path))
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    path, fd = write(_small_cache(), tmp_path)
    try:
        assert ran == [0] and os.path.exists(path)
    finally:
        os.close(fd)


def _small_cache() -> FeatureCache:
    return FeatureCache({"n": torch.arange(4)}, {"n": {"x": torch.ones(4, 2)}}, {"n": 8})


def _clean_until(folder: str, stop) -> None:
    while not stop.is_set():
        clean_stale(Path(folder))


def _build_many(folder: str, count: int, failures) -> None:
    cache, failed = _small_cache(), 0
    for _ in range(count):
        try:
            path, fd = write(cache, Path(folder))
        except OSError:  # a cleaner removed the file while it was being written
            failed += 1
            continue
        os.unlink(path)
        os.close(fd)
    failures.put(failed)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_racing_builders_and_cleaners_lose_no_file(tmp_path):
    """Four builders write 300 files each while two other jobs' cleaners loop: no write
    may fail (before the fix, a cleaner removed ~1% of the files being written)."""
    ctx = multiprocessing.get_context("fork")  # the race needs no fresh interpreter
    stop, failures = ctx.Event(), ctx.Queue()
    cleaners = [ctx.Process(target=_clean_until, args=(str(tmp_path), stop))
                for _ in range(2)]
    builders = [ctx.Process(target=_build_many, args=(str(tmp_path), 300, failures))
                for _ in range(4)]
    for proc in cleaners + builders:
        proc.start()
    try:
        failed = [failures.get(timeout=100) for _ in builders]
    finally:
        stop.set()
        for proc in builders + cleaners:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    assert [p.exitcode for p in builders + cleaners] == [0] * 6
    assert failed == [0] * 4, f"writes failed: {failed} of 300 per builder"


def test_in_place_edit_with_mtime_restored_is_refused(fetcher, tmp_path):
    """Bytes of a row flipped in place, size and mtime kept: adopting the file raises
    an error naming it (before, its rows were used)."""
    cache = _cache(fetcher)
    path, fd = write(cache, tmp_path)
    os.close(fd)
    file = FileId.of(path)
    attach(fetcher, file).close()  # untouched: adopted
    path, fd = write(cache, tmp_path)  # the last holder removed the first
    os.close(fd)
    file = FileId.of(path)
    node_type = fetcher.meta.node_types[0]
    raw = cache.rows[node_type]["x"].contiguous().numpy().tobytes()
    content = bytearray(Path(path).read_bytes())
    at = content.find(raw)
    assert at >= 0
    content[at + 1] ^= 0x01
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(content)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert FileId.of(path) == file  # what the old check compared
    with pytest.raises(SharedCacheError, match="differ from the digest") as info:
        attach(fetcher, file)
    assert path in str(info.value)
