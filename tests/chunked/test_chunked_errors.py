"""Every bad chunked input is one line naming the file, from the reader and the CLI."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict

import numpy as np
import pytest
import torch

from pyg_dist.chunked import ChunkedFormatError, read_chunked, write_chunked
from pyg_dist.cli.partition import main as partition_main
from pyg_dist.datasets._errors import MissingDependencyError

META = "metadata.json"


def _meta(folder: Path) -> Dict:
    return json.loads((folder / META).read_text())


def _edit(folder: Path, change: Callable[[Dict], None]) -> str:
    meta = _meta(folder)
    change(meta)
    (folder / META).write_text(json.dumps(meta))
    return str(folder / META)


def _file(folder: Path, kind: str, index: int = 1) -> Path:
    meta = _meta(folder)
    if kind == "edges":
        return folder / meta["edges"]["_N:_E:_N"]["data"][index]
    return folder / meta["node_data"]["_N"]["x"]["data"][index]


def _replace_npy(folder: Path, kind: str, array: np.ndarray, index: int = 1) -> str:
    path = _file(folder, kind, index)
    np.save(path, array)
    return str(path)


def _write_text(folder: Path, text: str) -> str:
    path = _file(folder, "edges")
    path.write_text(text)
    return str(path)


def _delete(folder: Path, kind: str) -> str:
    path = _file(folder, kind)
    path.unlink()
    return str(path)


def _del_key(key: str) -> Callable[[Dict], None]:
    return lambda m: m.pop(key)


def _set(change: Callable[[Dict], None]) -> Callable[[Path], str]:
    return lambda folder: _edit(folder, change)


# case name -> (edge format of the good folder, how to break it -> what the error must name)
CASES = {
    "no_metadata": ("numpy", lambda f: ((f / META).unlink(), str(f / META))[1]),
    "invalid_json": ("numpy", lambda f: ((f / META).write_text("{"), str(f / META))[1]),
    "missing_node_type": ("numpy", _set(_del_key("node_type"))),
    "missing_counts": ("numpy", _set(_del_key("num_nodes_per_chunk"))),
    "counts_not_a_list": ("numpy", _set(lambda m: m.update(num_nodes_per_chunk="60"))),
    "counts_negative": ("numpy", _set(lambda m: m.update(num_nodes_per_chunk=[[-1, 61]]))),
    "missing_edges_entry": ("numpy", _set(lambda m: m["edges"].pop("_N:_E:_N"))),
    "missing_data_list": ("numpy", _set(lambda m: m["edges"]["_N:_E:_N"].pop("data"))),
    "unknown_format": ("numpy", _set(
        lambda m: m["edges"]["_N:_E:_N"].update(format={"name": "hdf5"}))),
    "csv_node_data": ("numpy", _set(
        lambda m: m["node_data"]["_N"]["x"].update(format={"name": "csv"}))),
    "bad_edge_type": ("numpy", _set(lambda m: m.update(edge_type=["_N:_E"]))),
    "unknown_node_type": ("numpy", _set(lambda m: (
        m.update(edge_type=["_N:_E:paper"]),
        m["edges"].update({"_N:_E:paper": m["edges"].pop("_N:_E:_N")}),
        m.pop("edge_data")))),
    "data_of_unknown_type": ("numpy", _set(
        lambda m: m["node_data"].update(paper=m["node_data"]["_N"]))),
    "too_few_edge_files": ("numpy", _set(
        lambda m: m["edges"]["_N:_E:_N"]["data"].pop())),
    "missing_edge_chunk": ("numpy", lambda f: _delete(f, "edges")),
    "missing_node_chunk": ("numpy", lambda f: _delete(f, "node_data")),
    "edge_count_disagrees": ("numpy", lambda f: _replace_npy(
        f, "edges", np.zeros((3, 2), dtype=np.int64))),
    "csv_edge_count_disagrees": ("csv", lambda f: _write_text(f, "1 2\n3 4\n5 6\n")),
    "edge_id_past_node_count": ("numpy", lambda f: _replace_npy(
        f, "edges", np.full((20, 2), 60, dtype=np.int64))),
    "negative_edge_id_csv": ("csv", lambda f: _write_text(f, "1 2\n" * 19 + "-1 2\n")),
    "destination_past_node_count_csv": ("csv", lambda f: _write_text(
        f, "1 2\n" * 19 + "1 600\n")),
    "csv_three_columns": ("csv", lambda f: _write_text(f, "1 2 3\n" * 20)),
    "csv_not_integers": ("csv", lambda f: _write_text(f, "1 2\n" * 19 + "a b\n")),
    "float_edge_ids": ("numpy", lambda f: _replace_npy(f, "edges", np.zeros((20, 2)))),
    "edge_chunk_wrong_shape": ("numpy", lambda f: _replace_npy(
        f, "edges", np.zeros((20, 3), dtype=np.int64))),
    "not_an_npy_file": ("numpy", lambda f: (_file(f, "edges").write_bytes(b"garbage"),
                                            str(_file(f, "edges")))[1]),
    "feature_chunk_wrong_rows": ("numpy", lambda f: _replace_npy(
        f, "node_data", np.zeros((19, 3), dtype=np.float32))),
    "feature_chunk_wrong_width": ("numpy", lambda f: _replace_npy(
        f, "node_data", np.zeros((20, 4), dtype=np.float32))),
    "feature_rows_total_wrong": ("numpy", lambda f: (_set(
        lambda m: m["node_data"]["_N"]["x"]["data"].pop())(f),
        str(f / _meta(f)["node_data"]["_N"]["x"]["data"][-1]))[1]),
    "pickled_npy": ("numpy", lambda f: _replace_npy(
        f, "node_data", np.array([object()] * 20))),
}


@pytest.fixture(scope="module")
def good_folders(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    from pyg_dist.datasets import community_graph

    data = community_graph(60, 4.0, 3, 3, seed=0)  # 240 edges
    data.edge_time = torch.arange(data.edge_index.size(1))
    root = tmp_path_factory.mktemp("good")
    for fmt in ("numpy", "csv"):
        write_chunked(data, root / fmt, chunk_size=20, edge_format=fmt)
    return {fmt: root / fmt for fmt in ("numpy", "csv")}


def _broken(case: str, good_folders: Dict[str, Path], tmp_path: Path):
    fmt, breaker = CASES[case]
    folder = tmp_path / "broken"
    shutil.copytree(good_folders[fmt], folder)
    return folder, breaker(folder)


def _one_line_naming(message: str, name: str) -> None:
    assert len(message.strip().splitlines()) == 1, message
    assert name in message, (name, message)
    assert "Traceback" not in message


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_error_is_one_line_naming_the_file(case: str, good_folders, tmp_path) -> None:
    folder, name = _broken(case, good_folders, tmp_path)
    with pytest.raises(ChunkedFormatError) as info:
        read_chunked(folder)
    _one_line_naming(str(info.value), name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_partition_cli_exits_2_naming_the_file(case: str, good_folders, tmp_path,
                                               capsys) -> None:
    folder, name = _broken(case, good_folders, tmp_path)
    out = tmp_path / "parts"
    code = partition_main(["--input", str(folder), "--num-parts", "2", "--out", str(out),
                           "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    _one_line_naming(err, name)
    assert err.startswith("pyg-dist-partition: error: ") and not out.exists()


def test_missing_folder(tmp_path: Path, capsys) -> None:
    with pytest.raises(ChunkedFormatError, match="does not exist"):
        read_chunked(tmp_path / "nope")
    assert partition_main(["--input", str(tmp_path / "nope"), "--num-parts", "2",
                           "--out", str(tmp_path / "o"), "--quiet"]) == 2
    _one_line_naming(capsys.readouterr().err, str(tmp_path / "nope"))


def test_dataset_and_input_are_exclusive(tmp_path: Path, capsys) -> None:
    assert partition_main(["--dataset", "Cora", "--input", str(tmp_path), "--num-parts", "2",
                           "--out", str(tmp_path / "o")]) == 2
    assert "not allowed with" in capsys.readouterr().err
    assert partition_main(["--num-parts", "2", "--out", str(tmp_path / "o")]) == 2
    assert "--dataset --input" in capsys.readouterr().err


def test_parquet_without_pyarrow_names_the_extra(good_folders, tmp_path: Path, monkeypatch,
                                                 capsys) -> None:
    folder = tmp_path / "pq"
    shutil.copytree(good_folders["numpy"], folder)
    _edit(folder, lambda m: m["edges"]["_N:_E:_N"].update(format={"name": "parquet"}))
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingDependencyError, match=r"pyg_dist\[parquet\]"):
        read_chunked(folder)
    assert partition_main(["--input", str(folder), "--num-parts", "2",
                           "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pyarrow" in err


def test_validate_streams_every_edge_chunk(good_folders, tmp_path: Path) -> None:
    """open() checks headers only; validate() reads each edge chunk once and checks ids."""
    from pyg_dist.chunked import ChunkedGraph

    folder, name = _broken("edge_id_past_node_count", good_folders, tmp_path)
    graph = ChunkedGraph.open(folder)  # the header of the bad chunk is fine
    with pytest.raises(ChunkedFormatError, match="outside") as info:
        graph.validate()
    _one_line_naming(str(info.value), name)
    ChunkedGraph.open(good_folders["csv"]).validate()
