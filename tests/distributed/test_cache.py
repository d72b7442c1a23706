"""The hot-node feature cache returns exactly the rows an uncached fetch returns.

Each rank builds a sampler with ``feature_cache`` and fetches random and adversarial
id sets (all cached, none cached, duplicates, every node type), once through the cache
and once with it switched off; the rows must be identical. A budget of 0 disables it;
a byte budget is respected; hits and saved bytes are counted.
"""
from __future__ import annotations

import dataclasses
from typing import Dict

import pytest
import torch

from pyg_dist import (DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore,
                      Partitioner, shutdown_rpc)
from pyg_dist.format import _partition_io as io
from pyg_dist.testing import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here spawns processes


def _fetch(sampler, nodes: Dict, cached: bool):
    fetcher, cache = sampler.fetcher, sampler.fetcher.cache
    fetcher.cache = cache if cached else None
    try:
        out = sampler.group.loop.run(fetcher.fetch(nodes, {}, unique=True))
    finally:
        fetcher.cache = cache
    return out.nodes


def _cache_job(root: str, budget, direct: bool = False) -> dict:
    """Ranks as separate machines (``direct=False``), or as one machine reading each
    other's partitions directly (nothing remote left to cache)."""
    ctx = dataclasses.replace(DistContext.from_env(rpc_timeout=30), direct_reads=direct)
    meta = io.read_meta(root)
    pid = ctx.partition_id(meta.num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    try:
        sampler = DistNeighborSampler(data, num_neighbors=[2], current_ctx=ctx,
                                      feature_cache=budget)
        cache = sampler.fetcher.cache
        if not budget or direct:
            return {"cache": cache is None, "direct": sampler.direct.parts}
        g = torch.Generator().manual_seed(ctx.rank)
        sets = []
        for t in meta.node_types:
            n, cached = meta.num_nodes[t], cache.ids.get(t, torch.empty(0, dtype=torch.long))
            book = meta.node_book(t)
            mask = torch.ones(n, dtype=torch.bool)
            mask[cached] = False
            mask[book.start(pid):book.start(pid) + book.size(pid)] = True  # owned: local
            uncached_remote = torch.nonzero(mask).view(-1)
            sets += [{t: torch.randint(0, n, (300,), generator=g)},       # random, repeats
                     {t: cached},                                          # all cached
                     {t: torch.cat([cached, cached.flip(0)])},             # duplicates
                     {t: uncached_remote}]                                 # none cached
        sets.append({t: torch.randint(0, meta.num_nodes[t], (50,), generator=g)
                     for t in meta.node_types})                            # every type at once
        before = cache.stats.hits
        same = []
        for nodes in sets:
            a, b = _fetch(sampler, nodes, True), _fetch(sampler, nodes, False)
            same.append(all(torch.equal(a[t][k], b[t][k]) for t in a for k in a[t]))
        return {"same": same, "cached_rows": cache.num_rows, "nbytes": cache.nbytes,
                "hits": cache.stats.hits - before, "saved": cache.stats.bytes_saved,
                "sealed": _put_refused(data[0], meta), "shared": cache.file is not None}
    finally:
        shutdown_rpc()


def _put_refused(features, meta) -> bool:
    t = meta.node_types[0]
    try:
        features.put_tensor(torch.zeros(1, dtype=torch.long), group_name=t if meta.is_hetero
                            else None, attr_name="extra", index=None)
    except ValueError as exc:
        return "cache" in str(exc)
    return False


@pytest.fixture(scope="module")
def roots(cora, hetero_graph, tmp_path_factory):
    base = tmp_path_factory.mktemp("cache")
    out = {"cora": base / "cora", "hetero": base / "hetero"}
    Partitioner(cora, 2, out["cora"], progress=False).generate()
    Partitioner(hetero_graph, 3, out["hetero"], progress=False).generate()
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("graph,world,budget", [("cora", 2, 0.5), ("hetero", 3, 0.3),
                                                ("hetero", 3, 40_000)])
def test_cached_rows_equal_uncached_fetch(roots, graph, world, budget):
    results = run_ranks(_cache_job, world, str(roots[graph]), budget, timeout=150)
    for rank, r in enumerate(results):
        assert r["cached_rows"] > 0, (rank, r)
        assert all(r["same"]), (rank, r["same"])
        assert r["hits"] > 0 and r["saved"] > 0 and r["sealed"], (rank, r)
        assert r["shared"], (rank, "mapped from the machine's cache file")
        if isinstance(budget, int):
            assert r["nbytes"] <= budget, (rank, r)


@pytest.mark.timeout(120)
def test_cache_stays_private_where_no_file_can_be_shared(roots, tmp_path):
    """A cache folder that is missing (or full) leaves each process its own cache."""
    env = {"PYG_DIST_CACHE_DIR": str(tmp_path / "missing")}
    for rank, r in enumerate(run_ranks(_cache_job, 2, str(roots["cora"]), 0.5, timeout=100,
                                       extra_env=env)):
        assert r["cached_rows"] > 0 and all(r["same"]) and not r["shared"], (rank, r)


@pytest.mark.timeout(120)
def test_zero_budget_disables_the_cache(roots):
    assert run_ranks(_cache_job, 2, str(roots["cora"]), 0, timeout=100) == \
        [{"cache": True, "direct": []}] * 2


@pytest.mark.timeout(120)
def test_partitions_read_directly_are_not_cached(roots):
    """On one machine every other partition is read from its files: a cache of them
    would only copy what the page cache already holds."""
    assert run_ranks(_cache_job, 2, str(roots["cora"]), 0.5, True, timeout=100) == \
        [{"cache": True, "direct": [1]}, {"cache": True, "direct": [0]}]


def _wire_job(root: str, direct: bool) -> dict:
    """Fetches every node's features with bfloat16 on the wire: over RPC remote rows are
    the float32 rows rounded, read directly (same machine) they are exact."""
    ctx = dataclasses.replace(DistContext.from_env(rpc_timeout=30), direct_reads=direct)
    meta = io.read_meta(root)
    pid = ctx.partition_id(meta.num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    truth = {t: torch.cat([LocalFeatureStore.from_partition(root, p).tensor(t, "x")
                           for p in range(meta.num_parts)]) for t in meta.node_types}
    try:
        sampler = DistNeighborSampler(data, num_neighbors=[2], current_ctx=ctx,
                                      wire_dtype="bf16")
        out, checks = sampler.group.loop.run(sampler.fetcher.fetch(
            {t: torch.arange(meta.num_nodes[t]) for t in meta.node_types}, {})), {}
        for t in meta.node_types:
            book = meta.node_book(t)
            own = torch.zeros(meta.num_nodes[t], dtype=torch.bool)
            own[book.start(pid):book.start(pid) + book.size(pid)] = True
            got, want = out.nodes[t]["x"], truth[t]
            checks[t] = {"own_exact": torch.equal(got[own], want[own]),
                         "remote_exact": torch.equal(got[~own], want[~own]),
                         "remote_rounded": torch.equal(got[~own], want[~own].bfloat16().float())}
        return {"checks": checks, "direct_calls": sampler.direct.calls,
                "wire_bytes": sampler.fetcher.stats.bytes}
    finally:
        shutdown_rpc()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("direct", [False, True])
def test_bf16_on_the_wire_rounds_only_rows_that_travel(roots, direct):
    for rank, r in enumerate(run_ranks(_wire_job, 3, str(roots["hetero"]), direct, timeout=150)):
        for t, c in r["checks"].items():
            assert c["own_exact"], (rank, t)
            if direct:  # read from the owner's files: nothing travels, nothing rounded
                assert c["remote_exact"] and r["direct_calls"] > 0 and r["wire_bytes"] == 0
            else:
                assert c["remote_rounded"] and not c["remote_exact"], (rank, t, c)
                assert r["direct_calls"] == 0 and r["wire_bytes"] > 0


def _mapped_cache_files(pid: int) -> set:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1] for line in f if "pyg_dist-cache-" in line}


def _shared_job(root: str) -> dict:
    """Two trainers per partition on one machine (direct reads off, so every other
    partition is remote), one sampler worker each: batches must be exact, and the
    machine must hold one cache file per partition, mapped by trainers and workers."""
    import os

    import torch.distributed as dist

    from pyg_dist import DistNeighborLoader

    ctx = dataclasses.replace(DistContext.from_env(rpc_timeout=30), direct_reads=False)
    meta = io.read_meta(root)
    pid = ctx.partition_id(meta.num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    t = meta.node_types[0]
    truth = torch.cat([LocalFeatureStore.from_partition(root, p).tensor(t, "x")
                       for p in range(meta.num_parts)])
    book = meta.node_book(t)
    mine = torch.arange(book.start(pid), book.start(pid) + book.size(pid))
    # the two trainers of a partition split its nodes (seeds are original ids)
    half = data[0].id_tables.to_original("node", t, mine[ctx.rank % 2::2])
    try:
        loader = DistNeighborLoader(data, [3, 2], input_nodes=half, batch_size=128,
                                    num_workers=1, feature_cache=0.5, current_ctx=ctx)
        cache = loader.sampler.fetcher.cache
        built_bytes = loader.sampler.fetcher.stats.bytes  # the cache's own fetch, if built here
        exact = [torch.equal(b.x, truth[b.part_n_id]) for b in loader]  # truth: internal ids
        counted = loader.cache_stats  # counted in the worker, added up here
        files = _mapped_cache_files(os.getpid())
        workers = [_mapped_cache_files(p.pid) for p in loader._pool.procs]
        loader.close()
        path = cache.file.path if cache.file else None
        cache.close()
        dist.barrier()  # every process on the machine let go
        return {"exact": exact, "path": path, "files": sorted(files),
                "workers": [sorted(w) for w in workers], "built_bytes": built_bytes,
                "nbytes": cache.nbytes, "left": path is not None and os.path.exists(path),
                "worker_hits": counted.hits, "worker_remote": counted.remote_rows}
    finally:
        shutdown_rpc()


@pytest.mark.timeout(240)
def test_trainers_of_a_machine_share_one_cache_file(roots):
    results = run_ranks(_shared_job, 4, str(roots["cora"]), timeout=220)
    for rank, r in enumerate(results):
        assert r["exact"] and all(r["exact"]), (rank, r["exact"])
        assert r["path"] is not None and r["files"] == [r["path"]], (rank, r)
        assert r["workers"] == [[r["path"]]], (rank, r)  # the worker mapped it too
        assert r["worker_hits"] > 0 and r["worker_remote"] > 0, (rank, r)
        assert not r["left"], (rank, "the last user must remove the file")
    for part in (0, 1):  # ranks 2p, 2p+1 serve partition p: one file, fetched once
        a, b = results[2 * part], results[2 * part + 1]
        assert a["path"] == b["path"], (part, a["path"], b["path"])
        assert sorted([a["built_bytes"] > 0, b["built_bytes"] > 0]) == [False, True], \
            (part, a["built_bytes"], b["built_bytes"])
    assert results[0]["path"] != results[2]["path"]
