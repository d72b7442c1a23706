"""``loader.stats()``: where a loader's time went, per stage, and the rows it moved.

Every batch is checked on its own (``stats(reset=True)`` after each batch holds exactly
that batch): its stages add up to at most its producer's time, its rows are the batch's
nodes, and its bytes are those rows times the bytes of one row of every attribute
fetched. One partition here; two partitions (direct reads and RPC, in-process and in a
sampler worker) in ``tests/distributed/test_loader_stats.py``.
"""
from __future__ import annotations

import io
import json

import pytest
import torch

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      Partitioner, node_split, shutdown_rpc, track)
from pyg_dist.loader._stats import STAGES, LoaderStats, StatsRecorder
from pyg_dist._progress import PROGRESS_ENV, stages_wanted
from pyg_dist.sampler import _timing as timing
from pyg_dist.store._original_ids import ID_ATTR
from pyg_dist.testing import encode_ids
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE

PRODUCER_STAGES = timing.STAGES


def row_bytes(loader, kind: str) -> int:
    """Bytes of one fetched node (``kind="node"``) or edge row: every attribute the
    fetcher reads of it, a node's original id included (int64)."""
    fetcher, store = loader.sampler.fetcher, loader.features
    group = HOMO_NODE if kind == "node" else HOMO_EDGE
    total = 0
    for attr in (fetcher.node_attrs if kind == "node" else fetcher.edge_attrs).get(group, []):
        if attr == ID_ATTR:
            total += 8
        else:
            t = store.tensor(group, attr)
            total += t[0].numel() * t.element_size()
    return total


def check_batch(stats: LoaderStats, batch, sizes: tuple, own_only: bool = False) -> None:
    """One batch's stats (taken with ``reset=True`` right after the batch); ``sizes``:
    the bytes of a node row and of an edge row."""
    assert stats.batches == 1 and stats.seeds == batch.batch_size
    ms = {s: stats.stages[s].total_s * 1e3 for s in STAGES}
    assert ms["produce"] > 0 and ms["sample"] > 0 and ms["kernel"] > 0
    assert sum(ms[s] for s in PRODUCER_STAGES) <= ms["produce"] + 1e-6
    assert ms["kernel"] <= ms["sample"] + 1e-6
    assert ms["wait"] >= 0 and ms["finish"] >= 0
    nodes, edges = batch.n_id.numel(), batch.e_id.numel() if sizes[1] else 0
    rows = sum(r.rows for r in stats.rows.values())
    assert rows == nodes + edges and nodes == batch.num_nodes
    assert sum(r.bytes for r in stats.rows.values()) == nodes * sizes[0] + edges * sizes[1]
    if own_only:
        assert stats.rows["own"].rows == rows and stats.stages["fetch_own"].total_s > 0


@pytest.fixture(scope="module")
def cora1(cora, tmp_path_factory):
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora_stats")
    Partitioner(data, 1, root, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    yield stores, DistContext(rank=0, world_size=1)
    shutdown_rpc()


def test_every_batch_is_recorded_consistently(cora1):
    stores, ctx = cora1
    ids = node_split(stores, "train", ctx)
    loader = DistNeighborLoader(data=stores, num_neighbors=[10, 5], input_nodes=ids,
                                batch_size=32, current_ctx=ctx)
    size = (row_bytes(loader, "node"), row_bytes(loader, "edge"))
    assert size[0] > 8 and size[1] > 0  # features and the original id; edges' ids
    loader.stats(reset=True)
    batches = 0
    for batch in loader:
        check_batch(loader.stats(reset=True), batch, size, own_only=True)
        batches += 1
    assert batches == len(loader)
    for batch in loader:  # the totals of a whole pass
        pass
    stats = loader.stats()
    assert stats.batches == len(loader) and stats.seeds == ids.numel()
    produce = stats.stages["produce"].total_s
    assert sum(stats.stages[s].total_s for s in PRODUCER_STAGES) <= produce + 1e-9
    assert produce <= stats.elapsed_s  # one process, one loop: batches do not overlap
    assert stats.stages["wait"].total_s <= stats.elapsed_s
    assert stats.stages["sample"].median_ms <= stats.stages["sample"].total_s * 1e3
    assert stats.seeds_per_s > 0
    json.dumps(stats.to_dict())  # plain values
    assert loader.stats(reset=True).batches == len(loader)
    assert loader.stats().batches == 0 and loader.stats().split() == "no batches yet"
    loader.close()


def test_progress_shows_the_split(cora1, monkeypatch):
    stores, ctx = cora1
    loader = DistNeighborLoader(data=stores, num_neighbors=[5], input_nodes=None,
                                batch_size=512, current_ctx=ctx)
    out = io.StringIO()
    monkeypatch.setenv(PROGRESS_ENV, "stages")
    for _ in track(loader, "epoch 0", stream=out, every=1):
        pass
    lines = out.getvalue().splitlines()
    assert len(lines) == len(loader) + 1
    assert all("sample " in line and "wait " in line for line in lines[1:])
    out = io.StringIO()
    for _ in track(loader, "epoch 1", stream=out, every=1, stages=False):
        pass
    assert "sample " not in out.getvalue()
    monkeypatch.setenv(PROGRESS_ENV, "everything")
    with pytest.raises(ValueError, match="PYG_DIST_PROGRESS='everything'"):
        stages_wanted()
    loader.close()


def test_recording_is_per_task():
    """Batches in flight at once on one event loop keep their own records."""
    import asyncio

    async def batch(delay: float) -> timing.BatchTimes:
        with timing.recording() as times:
            start = timing.now_ns()
            await asyncio.sleep(delay)
            timing.lap(timing.current(), "sample", start)
            assert timing.current() is times
        return times

    async def both():
        return await asyncio.gather(batch(0.05), batch(0.01))

    slow, fast = asyncio.run(both())
    assert slow.sample_ns >= 0.05e9 > fast.sample_ns >= 0.01e9
    assert timing.current() is None
    recorder = StatsRecorder()
    recorder.add(slow, 5, 7)
    recorder.add(None, 1, 1)  # a batch without a producer's record counts as zeros
    stats = recorder.summary()
    assert stats.batches == 2 and stats.stages["wait"].total_s == pytest.approx(6e-9)


def _two_partition_job(root: str, num_workers: int) -> dict:
    from pathlib import Path

    from pyg_dist.format import _partition_io as fio

    ctx = DistContext.from_env(rpc_timeout=30)
    pid = ctx.partition_id(fio.read_meta(Path(root)).num_parts)
    stores = (LocalFeatureStore.from_partition(root, pid),
              LocalGraphStore.from_partition(root, pid))
    loader = DistNeighborLoader(data=stores, num_neighbors=[10, 5],
                                input_nodes=node_split(stores, "train", ctx)[:64],
                                batch_size=16, num_workers=num_workers, current_ctx=ctx)
    sizes = (row_bytes(loader, "node"), row_bytes(loader, "edge"))
    loader.stats(reset=True)
    rows = {s: 0 for s in timing.SOURCES}
    fetch_ms = {s: 0.0 for s in ("fetch_own", "fetch_direct", "fetch_remote")}
    batches = 0
    for batch in loader:
        stats = loader.stats(reset=True)
        check_batch(stats, batch, sizes)
        for source in rows:
            rows[source] += stats.rows[source].rows
        for stage in fetch_ms:
            fetch_ms[stage] += stats.stages[stage].total_s * 1e3
        batches += 1
    loader.close()
    shutdown_rpc()
    return {"rows": rows, "fetch_ms": fetch_ms, "batches": batches, "len": len(loader)}


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("num_workers,direct", [(0, "1"), (0, "0"), (1, "0")])
def test_two_partitions_split_rows_by_source(cora, tmp_path, num_workers, direct):
    from pyg_dist.testing import run_ranks

    Partitioner(encode_ids(cora), 2, tmp_path, seed=0, progress=False).generate()
    out = run_ranks(_two_partition_job, 2, str(tmp_path), num_workers, timeout=280,
                    extra_env={"PYG_DIST_DIRECT_READS": direct})
    for got in out:
        assert got["batches"] == got["len"] > 0
        rows, ms = got["rows"], got["fetch_ms"]
        assert rows["own"] > 0 and ms["fetch_own"] > 0
        other = "direct" if direct == "1" else "remote"  # the other partition's rows
        assert rows[other] > 0 and ms[f"fetch_{other}"] > 0
        assert rows["remote" if direct == "1" else "direct"] == 0 and rows["cached"] == 0
