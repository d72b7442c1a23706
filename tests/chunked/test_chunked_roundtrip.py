"""write_chunked -> ChunkedGraph / read_chunked gives back exactly the input graph."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dist.chunked import read_chunked, write_chunked
from pyg_dist.chunked._arrays import open_npy
from chunked_helpers import EDGE_FORMATS, assert_same_graph, needs_pyarrow


@pytest.mark.parametrize("edge_format", EDGE_FORMATS)
@pytest.mark.parametrize("chunk_size", [1, 7, 10_000])
def test_homogeneous_round_trip(tmp_path: Path, homo_graph, edge_format: str,
                                chunk_size: int) -> None:
    graph = write_chunked(homo_graph, tmp_path / "g", chunk_size=chunk_size,
                          edge_format=edge_format)
    assert not graph.is_hetero and graph.node_types == ("_N",)
    assert graph.edge_types == ("_N:_E:_N",)
    assert graph.node_data_names() == ("x", "y", "train_mask", "val_mask", "test_mask",
                                       "node_code")
    assert graph.edge_data_names() == ("edge_attr", "time")
    assert_same_graph(read_chunked(tmp_path / "g"), homo_graph)


@pytest.mark.parametrize("edge_format", EDGE_FORMATS)
def test_heterogeneous_round_trip(tmp_path: Path, small_hetero, edge_format: str) -> None:
    graph = write_chunked(small_hetero, tmp_path / "h", chunk_size=13, edge_format=edge_format)
    assert graph.is_hetero
    assert graph.edge_types == tuple(":".join(t) for t in small_hetero.edge_types)
    assert "edge_time" in graph.edge_data_names("author:writes:paper")
    assert "edge_attr" in graph.edge_data_names(("author", "writes", "paper"))
    assert_same_graph(read_chunked(tmp_path / "h"), small_hetero)


@needs_pyarrow
def test_parquet_data_round_trip(tmp_path: Path, homo_graph, small_hetero) -> None:
    write_chunked(homo_graph, tmp_path / "g", chunk_size=9, edge_format="parquet",
                  data_format="parquet")
    assert_same_graph(read_chunked(tmp_path / "g"), homo_graph)
    write_chunked(small_hetero, tmp_path / "h", chunk_size=9, data_format="parquet")
    assert_same_graph(read_chunked(tmp_path / "h"), small_hetero)


def test_streaming_reads_chunk_by_chunk(tmp_path: Path, homo_graph) -> None:
    graph = write_chunked(homo_graph, tmp_path / "g", chunk_size=7)
    chunks = list(graph.iter_edge_chunks())
    num_edges = homo_graph.edge_index.size(1)
    assert len(chunks) == -(-num_edges // 7) and all(s.numel() <= 7 for s, _ in chunks)
    assert all(s.dtype == torch.long and d.dtype == torch.long for s, d in chunks)
    src = torch.cat([s for s, _ in chunks])
    assert torch.equal(src, homo_graph.edge_index[0])
    x_chunks = list(graph.iter_node_data(None, "x"))
    assert [c.size(0) for c in x_chunks] == [7] * 8 + [4]
    times = torch.cat(list(graph.iter_edge_data(None, "time")))
    assert torch.equal(times, homo_graph.time)
    # .npy chunks are memory maps: nothing is read before it is indexed
    assert isinstance(open_npy(graph.meta.node_data["_N"]["x"].files[0]), np.memmap)


@pytest.mark.parametrize("start,stop", [(0, 60), (5, 20), (7, 14), (6, 8), (13, 13),
                                        (59, 60), (0, 0), (60, 60)])
def test_read_rows_across_chunk_boundaries(tmp_path: Path, homo_graph, start: int,
                                           stop: int) -> None:
    graph = write_chunked(homo_graph, tmp_path / "g", chunk_size=7)
    got = graph.read_rows(None, "x", start, stop)
    assert got.shape == homo_graph.x[start:stop].shape
    assert torch.equal(got, homo_graph.x[start:stop])
    edges = graph.read_edge_rows(None, "edge_attr", start, stop)
    assert torch.equal(edges, homo_graph.edge_attr[start:stop])


def test_read_rows_out_of_range(tmp_path: Path, homo_graph) -> None:
    graph = write_chunked(homo_graph, tmp_path / "g", chunk_size=7)
    with pytest.raises(IndexError, match="outside"):
        graph.read_rows(None, "x", 50, 61)
    with pytest.raises(KeyError, match="no data 'z'"):
        graph.read_rows(None, "z", 0, 1)


def test_real_cora_round_trip(tmp_path: Path, planetoid_root: Path) -> None:
    from pyg_dist.datasets._loading import load_planetoid

    root = tmp_path / "planetoid"
    shutil.copytree(planetoid_root / "Cora", root / "Cora")
    cora = load_planetoid(root, "Cora")
    write_chunked(cora, tmp_path / "cora", chunk_size=1000, edge_format="csv")
    meta = json.loads((tmp_path / "cora" / "metadata.json").read_text())
    assert meta["num_nodes_per_chunk"] == [[1000, 1000, 708]]
    assert len(meta["edges"]["_N:_E:_N"]["data"]) == 11  # 10556 edges
    assert_same_graph(read_chunked(tmp_path / "cora"), cora)


def test_empty_edge_type_and_zero_row_chunks(tmp_path: Path) -> None:
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["a"].x = torch.arange(6.).view(3, 2)
    data["b"].num_nodes = 0
    data["a", "r", "a"].edge_index = torch.empty(2, 0, dtype=torch.long)
    data["a", "r", "a"].w = torch.empty(0, 4)
    data["a", "s", "b"].edge_index = torch.empty(2, 0, dtype=torch.long)
    for fmt in ("numpy", "csv"):
        write_chunked(data, tmp_path / fmt, chunk_size=2, edge_format=fmt)
        assert_same_graph(read_chunked(tmp_path / fmt), data)


def test_writer_is_atomic_and_refuses_a_non_empty_out(tmp_path: Path, homo_graph) -> None:
    out = tmp_path / "g"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        write_chunked(homo_graph, out)
    write_chunked(homo_graph, out, chunk_size=5, overwrite=True)
    assert not (out / "keep").exists() and (out / "metadata.json").is_file()
    bad = homo_graph.clone()
    bad.x = bad.x.to(torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16"):
        write_chunked(bad, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["g"]  # no temporary folder left


@pytest.mark.parametrize("kwargs,match", [({"chunk_size": 0}, "chunk_size"),
                                          ({"edge_format": "hdf5"}, "edge_format"),
                                          ({"data_format": "csv"}, "data_format")])
def test_writer_rejects_bad_options(tmp_path: Path, homo_graph, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        write_chunked(homo_graph, tmp_path / "g", **kwargs)


def test_type_names_with_colons_are_refused(tmp_path: Path) -> None:
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["a:b"].num_nodes = 2
    data["a:b", "r", "a:b"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match="':'"):
        write_chunked(data, tmp_path / "g")


def test_csv_formatting_matches_numpy_savetxt() -> None:
    import io as _io

    from pyg_dist.chunked._arrays import format_ids

    rng = np.random.default_rng(0)
    cases = [np.array([[0, 0], [9, 10], [99, 100], [10**18 - 1, 10**18], [2**63 - 1, 0]]),
             rng.integers(0, 10**12, (1000, 2)), np.empty((0, 2), dtype=np.int64)]
    for ids in cases:
        for delimiter in (" ", ",", "\t"):
            want = _io.BytesIO()
            np.savetxt(want, ids, fmt="%d", delimiter=delimiter)
            assert format_ids(ids, delimiter) == want.getvalue()
    with pytest.raises(ValueError, match="non-negative"):
        format_ids(np.array([[0, -1]]))
