"""``pyg-dist-convert``: torch_geometric.distributed partition folders -> our format,
keeping PyG's node -> partition assignment, labels and splits."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pyg_dist.cli.convert import main
from pyg_dist.convert import convert_pyg_partitions
from pyg_dist.format import _partition_io as io
from pyg_dist._typing import HOMO_NODE
from pyg_dist.format import read_id_map


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def test_homo_folder_converts_with_labels_and_splits(pyg_homo, checked, tmp_path: Path,
                                                     capsys) -> None:
    out = tmp_path / "Toy-partitions"
    code, stdout, err = _run(capsys, "--input", str(pyg_homo.root), "--out", str(out),
                             "--trust-pickles", "--quiet")
    assert code == 0, err
    checked(pyg_homo, out)
    meta = io.read_meta(out)
    assert set(meta.splits) == {"train", "val", "test"}
    assert set(meta.node_attrs[HOMO_NODE]) >= {"x", "y", "time", "train_mask"}
    assert f"converted {pyg_homo.root}" in stdout and "cut %" in stdout
    assert not (tmp_path / "Toy-label").exists()  # extras only with --pyg-extras


def test_hetero_folder_converts_with_labels_and_splits(pyg_hetero, checked, tmp_path: Path,
                                                       capsys) -> None:
    out = tmp_path / "conv"
    code, _, err = _run(capsys, "--input", str(pyg_hetero.root), "--out", str(out),
                        "--trust-pickles", "--quiet")
    assert code == 0, err
    checked(pyg_hetero, out)
    meta = io.read_meta(out)
    assert meta.is_hetero and list(meta.node_types) == ["paper", "author", "institution"]
    assert "y" in meta.node_attrs["paper"] and "y" not in meta.node_attrs["author"]


def test_pyg_extras_are_written_in_dataset_ids(pyg_homo, tmp_path: Path, capsys) -> None:
    out = tmp_path / "Toy-partitions"
    code, _, err = _run(capsys, "--input", str(pyg_homo.root), "--out", str(out),
                        "--trust-pickles", "--quiet", "--pyg-extras")
    assert code == 0, err
    meta = io.read_meta(out)
    node_map = read_id_map(out)
    label = torch.load(tmp_path / "Toy-label" / "label.pt", weights_only=True)
    assert torch.equal(label, pyg_homo.data.y)  # dataset order, as PyG writes it
    offsets = meta.node_offsets[HOMO_NODE]
    for split, mask in pyg_homo.masks.items():
        folder = tmp_path / f"Toy-{split}-partitions"
        assert sorted(p.name for p in folder.iterdir()) == [
            f"partition{i}.pt" for i in range(pyg_homo.num_parts)]
        chunks = [torch.load(folder / f"partition{i}.pt", weights_only=True)
                  for i in range(pyg_homo.num_parts)]
        for i, ids in enumerate(chunks):  # original ids of nodes partition i owns
            assert set(ids.tolist()) <= set(node_map[offsets[i]:offsets[i + 1]].tolist())
        assert torch.equal(torch.sort(torch.cat(chunks)).values, torch.nonzero(mask).view(-1))


def test_hetero_pyg_extras_use_the_label_node_type(pyg_hetero, tmp_path: Path, capsys) -> None:
    out = tmp_path / "Mag-partitions"
    code, _, err = _run(capsys, "--input", str(pyg_hetero.root), "--out", str(out),
                        "--trust-pickles", "--quiet", "--pyg-extras",
                        "--label-node-type", "paper")
    assert code == 0, err
    node_map = read_id_map(out)["paper"]
    label = torch.load(tmp_path / "Mag-label" / "label.pt", weights_only=True)
    assert torch.equal(label, pyg_hetero.data["paper"].y)  # dataset order
    train = torch.cat([torch.load(tmp_path / "Mag-train-partitions" / f"partition{i}.pt")
                       for i in range(2)])
    assert node_map.numel() == label.numel()
    assert torch.equal(torch.sort(train).values,
                       torch.nonzero(pyg_hetero.masks["train"]).view(-1))


def test_folder_without_extras_converts(pyg_homo, checked, tmp_path: Path, capsys) -> None:
    src = pyg_homo.copy(tmp_path / "in").drop_extras()
    code, _, err = _run(capsys, "--input", str(src.root), "--out", str(tmp_path / "o"),
                        "--trust-pickles", "--quiet")
    assert code == 0, err
    checked(src, tmp_path / "o", labels=False)
    assert io.read_meta(tmp_path / "o").splits == ()


def test_refuses_pickles_without_trust(pyg_homo, tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    code, stdout, err = _run(capsys, "--input", str(pyg_homo.root), "--out", str(out),
                             "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "edge_feats.pt" in err and "--trust-pickles" in err and "arbitrary code" in err
    assert not out.exists()


def test_trust_pickles_says_so(pyg_homo, tmp_path: Path, capsys) -> None:
    code, stdout, err = _run(capsys, "--input", str(pyg_homo.root), "--out",
                             str(tmp_path / "o"), "--trust-pickles", "--quiet")
    assert code == 0
    lines = [line for line in (stdout + err).splitlines() if "weights_only=False" in line]
    assert len(lines) == 1 and "--trust-pickles" in lines[0], stdout + err
    assert f"{pyg_homo.num_parts} file(s)" in stdout  # the summary counts them


def test_library_api(pyg_hetero, checked, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="trust_pickles"):
        convert_pyg_partitions(pyg_hetero.root, tmp_path / "no", progress=False)
    with pytest.warns(UserWarning, match=r"trust_pickles=True: loading .*weights_only=False"):
        result = convert_pyg_partitions(pyg_hetero.root, tmp_path / "o", trust_pickles=True,
                                        progress=False)
    assert result.meta.num_parts == 2 and result.unsafe_files == pyg_hetero.num_parts
    assert result.label_node_type == "paper" and set(result.splits) == {"train", "val", "test"}
    checked(pyg_hetero, tmp_path / "o")


def test_overwrite(pyg_homo, tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    args = ("--input", str(pyg_homo.root), "--out", str(out), "--trust-pickles", "--quiet")
    code, _, err = _run(capsys, *args)
    assert code == 2 and "not empty" in err and "--overwrite" in err
    assert (out / "keep.txt").read_text() == "user data"
    code, _, err = _run(capsys, *args, "--overwrite")
    assert code == 0 and not (out / "keep.txt").exists() and (out / io.META_FILE).is_file()
