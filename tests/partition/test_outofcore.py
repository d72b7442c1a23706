"""Out-of-core partitioning of chunked graphs (``OutOfCorePartitioner``, ``--memory-budget``).

Tiny chunks and tiny budgets make every streaming path run and every buffer flush many
times; with the same assignment the output must equal the in-memory ``Partitioner``'s
file for file, and every output must pass the in-memory round-trip checks.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pyg_dist.chunked import read_chunked, write_chunked
from pyg_dist.cli.partition import main as partition_main
from pyg_dist.datasets import community_graph, hetero_community_graph
from pyg_dist.format import _partition_io as io
from pyg_dist.partition import Partitioner
from pyg_dist.format._part_manifest import MANIFEST_FILE
from pyg_dist.partition._outofcore import MemoryBudgetError, OutOfCorePartitioner, parse_size
from pyg_dist.format._tables import GraphTables
from test_roundtrip import check_roundtrip


def _homo():
    data = community_graph(400, 6.0, 3, 3, seed=0)
    data.edge_attr = torch.randn(data.edge_index.size(1), 2,
                                 generator=torch.Generator().manual_seed(0))
    data.edge_time = torch.arange(data.edge_index.size(1)) * 3
    data.time = torch.arange(400) % 7  # a node time: kept for halo nodes too
    return data


GRAPHS = {"homo": _homo, "hetero": lambda: hetero_community_graph(240, avg_degree=4,
                                                                    feat_dim=3, seed=1)}


def _equal(a: Any, b: Any, where: str) -> None:
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _equal(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b, where


def assert_same_output(got: Path, want: Path, num_parts: int) -> None:
    """Same META.json (uid included), id maps and partition files, and byte-identical
    files: every partition's MANIFEST.json (sizes and digests) is the same."""
    _equal(json.loads((got / io.META_FILE).read_text()),
           json.loads((want / io.META_FILE).read_text()), io.META_FILE)
    files = [f"part_{p}/{name}" for p in range(num_parts)
             for name in io.PART_FILES + io.ID_FILES]
    for name in files:
        _equal(io.load_pt(got / name), io.load_pt(want / name), name)
    for p in range(num_parts):
        name = f"part_{p}/{MANIFEST_FILE}"
        assert (got / name).read_text() == (want / name).read_text(), name


def _cut(meta) -> int:
    return sum(sum(p.cut_edges.values()) for p in meta.parts)


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize("method,coarsen", [("random", None), ("metis", True),
                                            ("metis", False)])
def test_same_output_as_in_memory(tmp_path: Path, graph: str, method: str, coarsen) -> None:
    data = GRAPHS[graph]()
    write_chunked(data, tmp_path / "chunks", chunk_size=29)
    data = read_chunked(tmp_path / "chunks")  # the in-memory path's view of the folder
    tables = GraphTables.from_data(data)
    for num_parts in (1, 2, 3):
        want, got = tmp_path / f"mem{num_parts}", tmp_path / f"ooc{num_parts}"
        Partitioner(data, num_parts, want, method=method, coarsen=coarsen,
                    progress=False).generate()
        ooc = OutOfCorePartitioner(tmp_path / "chunks", num_parts, got, "256KB", method=method,
                                   coarsen=coarsen, progress=False)
        meta = ooc.generate()
        assert_same_output(got, want, num_parts)
        assert check_roundtrip(tables, got, num_parts) == _cut(meta)
        assert ooc.bucket_flushes > len(tables.edge_index) + 1  # flushed mid-stream
        assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no scratch left
        assert {"assign", "order_edges", "copy_rows", "write"} <= set(ooc.timings.phases_s)


def test_buffers_flush_every_chunk(tmp_path: Path) -> None:
    """A budget whose buffer share is below one chunk's records: one flush per chunk."""
    data = _homo()
    write_chunked(data, tmp_path / "chunks", chunk_size=500)
    Partitioner(read_chunked(tmp_path / "chunks"), 2, tmp_path / "mem", method="random",
                progress=False).generate()
    ooc = OutOfCorePartitioner(tmp_path / "chunks", 2, tmp_path / "ooc", "160KB",
                               method="random", progress=False)
    ooc.generate()
    chunks = -(-data.edge_index.size(1) // 500)
    assert ooc.budget.buffer_bytes < 500 * 24 and chunks > 3 and ooc.bucket_flushes >= chunks
    assert_same_output(tmp_path / "ooc", tmp_path / "mem", 2)


def test_partitions_larger_than_the_budget_are_ordered_range_by_range(tmp_path: Path) -> None:
    """A budget far below one partition's edges: each partition's CSC is built from
    several destination ranges, and the output is still the in-memory path's."""
    data = _homo()
    write_chunked(data, tmp_path / "chunks", chunk_size=50)
    Partitioner(read_chunked(tmp_path / "chunks"), 2, tmp_path / "mem", method="random",
                progress=False).generate()
    ooc = OutOfCorePartitioner(tmp_path / "chunks", 2, tmp_path / "ooc", "8KB",
                               method="random", progress=False)
    ooc.generate()
    edges_per_part = data.edge_index.size(1) // 2
    assert edges_per_part * 56 > 8 * 1024 and ooc.edge_ranges >= 2 * 8
    assert_same_output(tmp_path / "ooc", tmp_path / "mem", 2)


@pytest.mark.parametrize("name,budget,coarsen", [("cora", "512KB", None),
                                                  ("community", "8MB", True)])
def test_cut_close_to_in_memory_metis(tmp_path: Path, cora, name: str, budget: str,
                                      coarsen) -> None:
    """Coarsened (Cora: because plain METIS would not fit the budget), the out-of-core
    cut stays within 1.3x of the in-memory METIS cut; partitions are valid and balanced."""
    data = cora if name == "cora" else community_graph(2000, 10.0, 4, 4, seed=0)
    write_chunked(data, tmp_path / "chunks", chunk_size=500)
    tables = GraphTables.from_data(data)
    for num_parts in (2, 3):
        want = Partitioner(data, num_parts, tmp_path / f"mem{num_parts}",
                           progress=False).generate()
        ooc = OutOfCorePartitioner(tmp_path / "chunks", num_parts, tmp_path / f"ooc{num_parts}",
                                   budget, coarsen=coarsen, progress=False)
        got = ooc.generate()
        assert "coarsen" in ooc.timings.phases_s and "metis" in ooc.timings.phases_s
        assert check_roundtrip(tables, tmp_path / f"ooc{num_parts}", num_parts) == _cut(got)
        assert _cut(got) <= 1.3 * _cut(want), (_cut(got), _cut(want))
        owned = [sum(p.owned_nodes.values()) for p in got.parts]
        assert max(owned) <= 1.03 * data.num_nodes / num_parts + 1, owned
        train = [p.train_nodes for p in got.parts]
        assert max(train) <= 1.05 * int(data.train_mask.sum()) / num_parts + 1, train


def test_cli_memory_budget(tmp_path: Path, capsys) -> None:
    write_chunked(_homo(), tmp_path / "chunks", chunk_size=50)
    args = ["--input", str(tmp_path / "chunks"), "--num-parts", "2", "--quiet"]
    assert partition_main(args + ["--out", str(tmp_path / "mem")]) == 0
    assert partition_main(args + ["--out", str(tmp_path / "ooc"), "--memory-budget", "1MB"]) == 0
    out = capsys.readouterr().out
    assert "out of core" in out and "peak RSS" in out and "order_edges" in out, out
    assert_same_output(tmp_path / "ooc", tmp_path / "mem", 2)  # 1MB fits plain METIS here


@pytest.mark.parametrize("extra,expected", [
    (["--memory-budget", "1KB"], "is too small"),
    (["--memory-budget", "lots"], "not a size"),
])
def test_cli_bad_budget_is_one_line(tmp_path: Path, capsys, extra, expected) -> None:
    write_chunked(_homo(), tmp_path / "chunks", chunk_size=50)
    out = tmp_path / "out"
    assert partition_main(["--input", str(tmp_path / "chunks"), "--num-parts", "2", "--quiet",
                           "--out", str(out)] + extra) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not out.exists()


def test_too_small_budget_names_the_size_needed(tmp_path: Path) -> None:
    write_chunked(_homo(), tmp_path / "chunks", chunk_size=50)
    with pytest.raises(MemoryBudgetError, match=r"needs? about .*KB.*--memory-budget [0-9.]+KB"):
        OutOfCorePartitioner(tmp_path / "chunks", 2, tmp_path / "o", 1000)
    assert parse_size("4GB") == 4 * 2**30 and parse_size("1.5k") == 1536


def test_memory_budget_needs_input(tmp_path: Path, capsys) -> None:
    assert partition_main(["--dataset", "synthetic", "--num-nodes", "50", "--num-parts", "2",
                           "--out", str(tmp_path / "o"), "--memory-budget", "1GB",
                           "--quiet"]) == 2
    assert "memory_budget applies to a chunked graph folder source (--input DIR)" in \
        capsys.readouterr().err


def test_graph_without_communities_stays_within_budget(tmp_path: Path) -> None:
    """A random graph keeps most edges between clusters: METIS on the cluster graph would
    exceed the budget, so clusters are dealt by size and refined (valid, balanced, and
    no worse a cut than the random method)."""
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(0)
    data = Data(edge_index=torch.randint(0, 3000, (2, 30000), generator=gen),
                x=torch.randn(3000, 2, generator=gen), num_nodes=3000)
    data.train_mask = torch.rand(3000, generator=gen) < 0.2
    write_chunked(data, tmp_path / "chunks", chunk_size=4000)
    tables = GraphTables.from_data(read_chunked(tmp_path / "chunks"))
    with pytest.warns(UserWarning, match="little community structure"):
        meta = OutOfCorePartitioner(tmp_path / "chunks", 2, tmp_path / "ooc", "1MB",
                                    progress=False).generate()
    assert check_roundtrip(tables, tmp_path / "ooc", 2) == _cut(meta)
    owned = [sum(p.owned_nodes.values()) for p in meta.parts]
    assert max(owned) <= 1.03 * 1500 + 1, owned
    train = [p.train_nodes for p in meta.parts]
    assert max(train) <= 1.05 * int(data.train_mask.sum()) / 2 + 1, train
    rand = OutOfCorePartitioner(tmp_path / "chunks", 2, tmp_path / "rand", "1MB",
                                method="random", progress=False).generate()
    assert _cut(meta) < _cut(rand), (_cut(meta), _cut(rand))


@pytest.mark.parametrize("values", [[], [7], [3, -1, 3, 2, -1], list(range(50, 0, -3)) * 2])
def test_sorted_unique_equals_numpy_unique(values: list) -> None:
    import numpy as np

    from pyg_dist.partition._graph_kernels import sorted_unique

    array = np.array(values, dtype=np.int64)
    got = sorted_unique(array)
    assert got.dtype == np.int64 and np.array_equal(got, np.unique(array))
