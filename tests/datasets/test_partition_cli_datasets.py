"""``pyg-dist-partition --dataset NAME``: PyG classes and OGB datasets end to end."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch_geometric.datasets as pyg_datasets

from pyg_dist import LocalFeatureStore
from pyg_dist.cli.partition import main
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map


def _cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple:
    code = main(list(argv) + ["--quiet"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def _check_rows(out: Path, num_parts: int, node_type=None) -> None:
    """Every stored x row is the one of its original node (x[:, 0] encodes the id)."""
    node_map = read_id_map(out)
    node_map = node_map[node_type] if node_type else node_map
    for part in range(num_parts):
        store = LocalFeatureStore.from_partition(out, part)
        group = store.resolve(node_type, "x")
        lo, hi = store.book(group).offsets[part], store.book(group).offsets[part + 1]
        x = store.tensor(group, "x")
        assert torch.equal(x[:, 0].round().long(), node_map[lo:hi])


@pytest.mark.parametrize("name", ["Reddit", "Flickr", "Yelp", "AmazonProducts"])
def test_partitions_pyg_class(raw, tmp_path: Path, capsys, name: str) -> None:
    root = raw.reddit(tmp_path / name) if name == "Reddit" else raw.saint(
        tmp_path / name, multilabel=name in ("Yelp", "AmazonProducts"))
    out = tmp_path / "out"
    code, _, err = _cli(capsys, "--dataset", name, "--root", str(root), "--num-parts", "2",
                        "--out", str(out))
    assert code == 0, err
    meta = io.read_meta(out)
    assert meta.num_nodes == {"_N": raw.N} and set(meta.splits) == {"train", "val", "test"}
    assert sum(p.train_nodes for p in meta.parts) == len(raw.TRAIN)
    _check_rows(out, 2)


def test_missing_raw_file_is_one_line_exit_2(raw, tmp_path: Path, capsys,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyg_datasets.Reddit, "download", lambda self: pytest.fail("download"))
    root = raw.reddit(tmp_path / "Reddit")
    (root / "raw" / "reddit_graph.npz").unlink()
    out = tmp_path / "out"
    code, _, err = _cli(capsys, "--dataset", "Reddit", "--root", str(root), "--num-parts", "2",
                        "--out", str(out))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "reddit_graph.npz" in err and str(root / "raw") in err and "--download" in err
    assert not out.exists() and not (root / "processed").exists()


def test_download_flag_reaches_the_class(raw, tmp_path: Path, capsys,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyg_datasets.Flickr, "download",
                        lambda self: raw.saint(Path(self.raw_dir).parent))
    code, _, err = _cli(capsys, "--dataset", "Flickr", "--root", str(tmp_path / "F"),
                        "--num-parts", "2", "--out", str(tmp_path / "out"), "--download")
    assert code == 0, err


@pytest.mark.parametrize("argv,message", [
    (["--dataset", "Redit"], "did you mean Reddit"),
    (["--dataset", "Reddit"], "--root is required for Reddit"),
    (["--dataset", "Amazon"], "pass --dataset Amazon:<name>"),
    (["--dataset", "ogbn-papers100M"], "not implemented yet"),
])
def test_bad_names_are_one_line_exit_2(tmp_path: Path, capsys, argv: list,
                                       message: str) -> None:
    root = ["--root", str(tmp_path)] if argv[-1] not in ("Reddit",) else []
    code, _, err = _cli(capsys, *argv, *root, "--num-parts", "2", "--out", str(tmp_path / "o"))
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_missing_ogb_is_one_line_exit_2(tmp_path: Path, capsys,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ogb.io.read_graph_raw", None)
    code, _, err = _cli(capsys, "--dataset", "ogbn-arxiv", "--root", str(tmp_path),
                        "--num-parts", "2", "--out", str(tmp_path / "o"))
    assert code == 2 and "pip install ogb" in err and len(err.splitlines()) == 1, err


def test_partitions_ogb_arxiv(raw, tmp_path: Path, capsys) -> None:
    pytest.importorskip("ogb")
    raw.ogb_homo(tmp_path, "ogbn-arxiv")
    out = tmp_path / "ogbn-arxiv-partitions"
    code, stdout, err = _cli(capsys, "--dataset", "ogbn-arxiv", "--root", str(tmp_path),
                             "--num-parts", "2", "--out", str(out))
    assert code == 0, err
    assert "Loading necessary files" not in stdout  # ogb's chatter goes to stderr
    meta = io.read_meta(out)
    assert meta.num_nodes == {"_N": raw.N} and meta.node_attrs["_N"]["y"].shape == ()
    _check_rows(out, 2)


def test_partitions_ogb_mag_with_pyg_extras(raw, tmp_path: Path, capsys) -> None:
    pytest.importorskip("ogb")
    raw.ogb_mag(tmp_path)
    out = tmp_path / "mag-partitions"
    code, _, err = _cli(capsys, "--dataset", "ogbn-mag", "--root", str(tmp_path),
                        "--num-parts", "2", "--out", str(out), "--pyg-extras")
    assert code == 0, err
    meta = io.read_meta(out)
    assert meta.is_hetero and meta.num_nodes == raw.MAG_TYPES
    _check_rows(out, 2, "paper")
    node_map = read_id_map(out)["paper"]
    label = torch.load(tmp_path / "mag-label" / "label.pt", weights_only=True)
    assert node_map.numel() == label.numel()
    assert label.tolist() == torch.from_numpy(raw.LABELS).tolist()  # dataset order
    train = torch.cat([torch.load(tmp_path / "mag-train-partitions" / f"partition{i}.pt",
                                  weights_only=True) for i in range(2)])
    assert sorted(train.tolist()) == raw.TRAIN
