"""A metadata.json written by hand, as DGL's docs and Spark pipelines write it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData

from chunked_helpers import needs_pyarrow
from pyg_dist.chunked import ChunkedFormatError, ChunkedGraph, read_chunked
from pyg_dist.cli.partition import main as partition_main

# author -writes-> paper (5 edges), paper -cites-> paper (4 edges); 3 authors, 4 papers
WRITES = np.array([[0, 0], [0, 1], [1, 2], [2, 3], [2, 0]])
CITES = np.array([[1, 0], [2, 0], [3, 1], [3, 2]])


def _dgl_folder(root: Path, per_type: bool = False) -> Path:
    """MAG-like layout: csv edges with a space delimiter, npy node data chunked
    independently of the node counts, an absolute path (read only with
    ``allow_external_paths``), an edge feature."""
    (root / "edges").mkdir(parents=True)
    (root / "node_data").mkdir()
    (root / "edges" / "writes-part1.csv").write_text("0 0\n0 1\n1 2\n")
    (root / "edges" / "writes-part2.csv").write_text("2 3\n2 0\n")
    (root / "edges" / "cites-part1.csv").write_text("1 0\n2 0\n3 1\n3 2\n")
    feat = np.arange(4 * 3, dtype=np.float32).reshape(4, 3)
    np.save(root / "node_data" / "paper-feat-part1.npy", feat[:1])
    np.save(root / "node_data" / "paper-feat-part2.npy", feat[1:])
    np.save(root / "node_data" / "paper-label-part1.npy", np.array([0, 1, 1, 0]))
    np.save(root / "writes-year.npy", np.array([2001, 2002, 2003, 2004, 2005]))
    meta = {
        "graph_name": "mag-like",
        "node_type": ["author", "paper"],
        "edge_type": ["author:writes:paper", "paper:cites:paper"],
        "edges": {
            "author:writes:paper": {"format": {"name": "csv", "delimiter": " "},
                                    "data": ["edges/writes-part1.csv",
                                             "edges/writes-part2.csv"]},
            "paper:cites:paper": {"format": {"name": "csv", "delimiter": " "},
                                  "data": ["edges/cites-part1.csv"]}},
        "node_data": {"paper": {
            "feat": {"format": {"name": "numpy"},
                     "data": ["node_data/paper-feat-part1.npy",
                              "node_data/paper-feat-part2.npy"]},
            "label": {"format": {"name": "numpy"},
                      "data": ["node_data/paper-label-part1.npy"]}}},
        "edge_data": {"author:writes:paper": {"year": {
            "format": {"name": "numpy"}, "data": [str(root / "writes-year.npy")]}}}}
    if per_type:
        meta.update(num_nodes_per_type=[3, 4], num_edges_per_type=[5, 4])
    else:
        meta.update(num_nodes_per_chunk=[[2, 1], [2, 2]], num_edges_per_chunk=[[3, 2], [4]])
    (root / "metadata.json").write_text(json.dumps(meta, indent=4))
    return root


@pytest.mark.parametrize("per_type", [False, True])
def test_hand_written_metadata_reads_correctly(tmp_path: Path, per_type: bool) -> None:
    folder = _dgl_folder(tmp_path / "g", per_type)
    with pytest.raises(ChunkedFormatError, match="writes-year.npy' is absolute"):
        ChunkedGraph.open(folder)  # DGL allows absolute paths; pyg_dist only on request
    graph = ChunkedGraph.open(folder, allow_external_paths=True)
    assert graph.meta.graph_name == "mag-like" and graph.is_hetero
    assert graph.num_nodes("author") == 3 and graph.num_nodes("paper") == 4
    assert [s.numel() for s, _ in graph.iter_edge_chunks("author:writes:paper")] == [3, 2]
    assert torch.equal(graph.read_rows("paper", "feat", 0, 3),
                       torch.arange(9, dtype=torch.float32).view(3, 3))
    data = read_chunked(tmp_path / "g", allow_external_paths=True)
    assert isinstance(data, HeteroData)
    assert data.node_types == ["author", "paper"]
    assert data["author"].num_nodes == 3 and data["paper"].num_nodes == 4
    writes = data["author", "writes", "paper"]
    assert torch.equal(writes.edge_index, torch.from_numpy(WRITES.T.copy()))
    assert torch.equal(writes.year, torch.tensor([2001, 2002, 2003, 2004, 2005]))
    assert torch.equal(data["paper", "cites", "paper"].edge_index,
                       torch.from_numpy(CITES.T.copy()))
    assert torch.equal(data["paper"].feat, torch.arange(12, dtype=torch.float32).view(4, 3))
    assert torch.equal(data["paper"].label, torch.tensor([0, 1, 1, 0]))


def test_per_type_counts_are_checked_when_read(tmp_path: Path) -> None:
    folder = _dgl_folder(tmp_path / "g", per_type=True)
    (folder / "edges" / "writes-part2.csv").write_text("2 3\n")  # 4 edges, not 5
    # the chunks' sizes already rule out 5 edges: refused at open, before any is read
    with pytest.raises(ChunkedFormatError,
                       match="hold (at most )?4 edges .*writes-part2.csv.* says 5"):
        read_chunked(folder, allow_external_paths=True)
    (folder / "edges" / "writes-part2.csv").write_text("2 3\n\n\n\n\n")  # room for 5 lines
    with pytest.raises(ChunkedFormatError, match="hold 4 edges .*writes-part2.csv.* says 5"):
        read_chunked(folder, allow_external_paths=True)


def test_hand_written_folder_partitions(tmp_path: Path) -> None:
    folder = _dgl_folder(tmp_path / "g")
    out = tmp_path / "parts"
    assert partition_main(["--input", str(folder), "--num-parts", "2", "--out", str(out),
                           "--method", "random", "--quiet", "--allow-external-paths"]) == 0
    meta = json.loads((out / "META.json").read_text())
    assert meta["num_nodes"] == {"author": 3, "paper": 4}
    assert meta["num_edges"] == {"author__writes__paper": 5, "paper__cites__paper": 4}


@needs_pyarrow
def test_spark_style_parquet_edges_and_feature_columns(tmp_path: Path) -> None:
    """Parquet edges with named columns; features one column per dimension."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = _dgl_folder(tmp_path / "g")
    pq.write_table(pa.table({"src_id": [1, 2, 3, 3], "dst_id": [0, 0, 1, 2]}),
                   folder / "edges" / "cites.parquet")
    pq.write_table(pa.table({"f0": [0.0, 3.0, 6.0, 9.0], "f1": [1.0, 4.0, 7.0, 10.0],
                             "f2": [2.0, 5.0, 8.0, 11.0]}), folder / "feat.parquet")
    meta = json.loads((folder / "metadata.json").read_text())
    meta["edges"]["paper:cites:paper"] = {"format": {"name": "parquet"},
                                          "data": ["edges/cites.parquet"]}
    meta["node_data"]["paper"]["feat"] = {"format": {"name": "parquet"},
                                          "data": ["feat.parquet"]}
    (folder / "metadata.json").write_text(json.dumps(meta))
    data = read_chunked(folder, allow_external_paths=True)
    assert torch.equal(data["paper", "cites", "paper"].edge_index,
                       torch.from_numpy(CITES.T.copy()))
    assert torch.equal(data["paper"].feat,
                       torch.arange(12, dtype=torch.float64).view(4, 3))


@needs_pyarrow
def test_parquet_chunks_of_different_dtypes_are_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = _dgl_folder(tmp_path / "g")
    pq.write_table(pa.table({"0": np.array([0, 1], dtype=np.int64)}), folder / "l0.parquet")
    pq.write_table(pa.table({"0": np.array([1.0, 0.0])}), folder / "l1.parquet")
    meta = json.loads((folder / "metadata.json").read_text())
    meta["node_data"]["paper"]["label"] = {"format": {"name": "parquet"},
                                           "data": ["l0.parquet", "l1.parquet"]}
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ChunkedFormatError, match="l1.parquet holds rows of shape"):
        read_chunked(folder, allow_external_paths=True)
