"""``pyg-dist-convert`` on bad input: one line naming the file, exit code 2, nothing written."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
import torch

from pyg_dist.cli.convert import main


def _fails(capsys: pytest.CaptureFixture, src: Path, out: Path, *extra: str) -> str:
    code = main(["--input", str(src), "--out", str(out), "--trust-pickles", "--quiet", *extra])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2, lines
    # one error line; the only other line allowed is --trust-pickles' notice
    errors = [line for line in lines if line.startswith("pyg-dist-convert: error: ")]
    assert len(errors) == 1 and all("warning: --trust-pickles" in line
                                    for line in lines if line not in errors), lines
    assert not out.exists()
    return errors[0]


def _edit(path: Path, change: Callable) -> None:
    obj = torch.load(path, weights_only=False)
    obj = change(obj)
    torch.save(obj, path)


def _set(obj, key, value):
    obj[key] = value
    return obj


def test_missing_input_and_meta(pyg_homo, tmp_path: Path, capsys) -> None:
    err = _fails(capsys, tmp_path / "nope", tmp_path / "o")
    assert "nope" in err and "does not exist" in err
    src = pyg_homo.copy(tmp_path / "in")
    (src.root / "META.json").unlink()
    assert "META.json" in _fails(capsys, src.root, tmp_path / "o")


def test_bad_meta(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    meta = json.loads((src.root / "META.json").read_text())
    for bad, message in ((dict(meta, num_parts="3"), "num_parts"),
                         (dict(meta, is_hetero=True), "node_types"),
                         ({**meta, "num_parts": 5}, "part_3")):
        (src.root / "META.json").write_text(json.dumps(bad))
        err = _fails(capsys, src.root, tmp_path / "o")
        assert message in err, err
    (src.root / "META.json").write_text("{not json")
    assert "META.json" in _fails(capsys, src.root, tmp_path / "o")


def test_hetero_folder_older_than_pyg_25_is_refused(pyg_hetero, tmp_path: Path,
                                                   capsys) -> None:
    src = pyg_hetero.copy(tmp_path / "in")
    meta = json.loads((src.root / "META.json").read_text())
    del meta["node_offset"], meta["is_sorted"]  # what PyG 2.4 wrote
    (src.root / "META.json").write_text(json.dumps(meta))
    assert "torch_geometric < 2.5" in _fails(capsys, src.root, tmp_path / "o")
    (src.root / "META.json").write_text(json.dumps({**meta, "node_offset": [0, 1, 2]}))
    assert "node_offset" in _fails(capsys, src.root, tmp_path / "o")


@pytest.mark.parametrize("name", ["graph.pt", "node_feats.pt", "edge_feats.pt"])
def test_missing_part_file(pyg_homo, tmp_path: Path, capsys, name: str) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    (src.root / "part_1" / name).unlink()
    err = _fails(capsys, src.root, tmp_path / "o")
    assert f"part_1/{name}" in err and "missing" in err


def test_damaged_file(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    path = src.root / "part_0" / "node_feats.pt"
    path.write_bytes(path.read_bytes()[:100])
    assert "part_0/node_feats.pt" in _fails(capsys, src.root, tmp_path / "o")
    path.write_bytes(b"not a torch file at all")
    assert "part_0/node_feats.pt" in _fails(capsys, src.root, tmp_path / "o")


def test_node_map_length_disagrees(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    _edit(src.root / "node_map.pt", lambda m: m[:-1])
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "node_map.pt" in err or "node_feats.pt" in err, err


def test_map_ids_out_of_range(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    _edit(src.root / "edge_map.pt", lambda m: m.index_fill(0, torch.tensor([5]), 7))
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "edge_map.pt" in err and "[0, 3)" in err


def test_edge_endpoint_out_of_range(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    _edit(src.root / "part_0" / "graph.pt",
          lambda g: _set(g, "row", g["row"].index_fill(0, torch.tensor([0]), 10**6)))
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "part_0/graph.pt" in err and "row" in err


def test_node_listed_in_the_wrong_partition(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    node_map = torch.load(src.root / "node_map.pt")
    node_map[int(torch.load(src.root / "part_0" / "node_feats.pt")["global_id"][0])] = 1
    torch.save(node_map, src.root / "node_map.pt")
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "part_0/node_feats.pt" in err and "node_map" in err


def test_feature_rows_disagree(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    _edit(src.root / "part_2" / "node_feats.pt",
          lambda f: _set(f, "feats", {"x": f["feats"]["x"][:-1]}))
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "part_2/node_feats.pt" in err and "'x'" in err


def test_edge_listed_twice(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    path = src.root / "part_0" / "graph.pt"
    _edit(path, lambda g: _set(g, "edge_id", g["edge_id"].index_fill(
        0, torch.tensor([1]), int(g["edge_id"][0]))))
    assert "part_0/graph.pt" in _fails(capsys, src.root, tmp_path / "o")


def test_bad_extras(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    label = src.root.parent / "Toy-label" / "label.pt"
    torch.save(torch.zeros(5, dtype=torch.long), label)
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "Toy-label/label.pt" in err and "600" in err
    torch.save(pyg_homo.data.y, label)
    chunk = src.root.parent / "Toy-val-partitions" / "partition1.pt"
    torch.save(torch.tensor([3, 600]), chunk)
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "Toy-val-partitions/partition1.pt" in err and "[0, 600)" in err
    chunk.unlink()
    err = _fails(capsys, src.root, tmp_path / "o")
    assert "Toy-val-partitions/partition1.pt" in err and "missing" in err


def test_hetero_label_type_must_be_clear(pyg_hetero, tmp_path: Path, capsys) -> None:
    src = pyg_hetero.copy(tmp_path / "in")
    torch.save(torch.zeros(20, dtype=torch.long), src.root.parent / "Mag-label" / "label.pt")
    err = _fails(capsys, src.root, tmp_path / "o", "--label-node-type", "paper")
    assert "label.pt" in err and "300" in err
    err = _fails(capsys, src.root, tmp_path / "o", "--label-node-type", "venue")
    assert "venue" in err


def test_pyg_extras_need_inputs_and_a_free_place(pyg_homo, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in")
    (tmp_path / "Toy-label").mkdir()
    (tmp_path / "Toy-label" / "label.pt").write_text("mine")
    err = _fails(capsys, src.root, tmp_path / "Toy-partitions", "--pyg-extras")
    assert "Toy-label" in err and "--overwrite" in err
    assert (tmp_path / "Toy-label" / "label.pt").read_text() == "mine"
    bare = pyg_homo.copy(tmp_path / "bare").drop_extras()
    err = _fails(capsys, bare.root, tmp_path / "b" / "x", "--pyg-extras")
    assert "--pyg-extras" in err and "label" in err
