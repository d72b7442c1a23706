"""pyg-dist-chunk, and pyg-dist-partition --input giving the same partitions as in memory."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest
import torch

from chunked_helpers import EDGE_FORMATS, assert_same_graph
from pyg_dist.chunked import read_chunked
from pyg_dist.cli.chunk import main as chunk_main
from pyg_dist.cli.partition import main as partition_main
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map

SYNTHETIC = ["--dataset", "synthetic", "--num-nodes", "300", "--avg-degree", "6",
             "--feat-dim", "4", "--num-classes", "3", "--seed", "3"]


def _same_partitions(a: Path, b: Path) -> None:
    assert json.loads((a / io.META_FILE).read_text()) == json.loads((b / io.META_FILE).read_text())
    for kind in ("node", "edge"):
        got, want = read_id_map(a, kind), read_id_map(b, kind)
        if isinstance(want, dict):
            assert got.keys() == want.keys()
            assert all(torch.equal(got[k], want[k]) for k in want)
        else:
            assert torch.equal(got, want)


def _partition_both(tmp_path: Path, source: List[str], chunk_args: List[str]) -> None:
    chunked = tmp_path / "chunked"
    assert chunk_main(source + ["--out", str(chunked), "--quiet"] + chunk_args) == 0
    part = ["--num-parts", "2", "--seed", "3", "--quiet"]
    assert partition_main(source + part + ["--out", str(tmp_path / "direct")]) == 0
    assert partition_main(["--input", str(chunked)] + part
                          + ["--out", str(tmp_path / "via_chunks")]) == 0
    _same_partitions(tmp_path / "via_chunks", tmp_path / "direct")


@pytest.mark.parametrize("edge_format", EDGE_FORMATS)
def test_synthetic_partitions_equal_in_memory(tmp_path: Path, edge_format: str) -> None:
    _partition_both(tmp_path, SYNTHETIC, ["--chunk-size", "97", "--edge-format", edge_format])


def test_hetero_synthetic_partitions_equal_in_memory(tmp_path: Path) -> None:
    _partition_both(tmp_path, SYNTHETIC + ["--hetero"], ["--chunk-size", "50"])


def test_cora_partitions_equal_in_memory(tmp_path: Path, planetoid_root: Path, cora) -> None:
    source = ["--dataset", "Cora", "--root", str(planetoid_root)]
    _partition_both(tmp_path, source, ["--chunk-size", "700", "--edge-format", "csv"])
    assert_same_graph(read_chunked(tmp_path / "chunked"), cora)


def test_saved_graph_file(tmp_path: Path, homo_graph) -> None:
    torch.save(homo_graph.to_dict(), tmp_path / "g.pt")
    assert chunk_main(["--dataset", str(tmp_path / "g.pt"), "--out", str(tmp_path / "c"),
                       "--chunk-size", "8", "--quiet"]) == 0
    assert_same_graph(read_chunked(tmp_path / "c"), homo_graph)


@pytest.mark.parametrize("args,names", [
    (["--chunk-size", "0"], "--chunk-size"),
    (["--chunk-size", "x"], "--chunk-size"),
    (["--edge-format", "hdf5"], "--edge-format"),
    (["--data-format", "csv"], "--data-format"),
    (["--delimiter", "ab"], "--delimiter"),
    (["--num-nodes", "1"], "--num-nodes"),
    (["--avg-degree", "nan"], "--avg-degree"),
])
def test_chunk_cli_bad_option_is_one_line(tmp_path: Path, capsys, args, names) -> None:
    out = tmp_path / "o"
    assert chunk_main(SYNTHETIC + ["--out", str(out), "--quiet"] + args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and names in err, err
    assert err.startswith("pyg-dist-chunk: error: ") and not out.exists()


def test_chunk_cli_bad_dataset_and_existing_out(tmp_path: Path, capsys) -> None:
    assert chunk_main(["--dataset", "Coraa", "--root", str(tmp_path), "--out",
                       str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unknown dataset" in err
    out = tmp_path / "full"
    out.mkdir()
    (out / "f").write_text("x")
    assert chunk_main(SYNTHETIC + ["--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not empty" in err
    assert chunk_main(SYNTHETIC + ["--out", str(out), "--quiet", "--overwrite"]) == 0
    assert (out / "metadata.json").is_file() and not (out / "f").exists()
