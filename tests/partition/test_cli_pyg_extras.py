"""``pyg-dist-partition --pyg-extras``: torch_geometric.distributed's label and split files."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pyg_dist.cli.partition import main
from pyg_dist.datasets._pyg_extras import extras_layout
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map


def _load(path: Path) -> torch.Tensor:
    return torch.load(path, weights_only=True)


def _cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple:
    code = main(list(argv) + ["--quiet"])
    return code, capsys.readouterr().err.strip()


def _partition_cora(capsys, planetoid_root: Path, out: Path, parts: int, *extra: str) -> None:
    code, err = _cli(capsys, "--dataset", "Cora", "--root", str(planetoid_root), "--num-parts",
                     str(parts), "--out", str(out), "--pyg-extras", *extra)
    assert code == 0, err


def test_cora_extras_in_dataset_ids(cora, planetoid_root: Path, tmp_path: Path,
                                    capsys) -> None:
    """label.pt and partition<i>.pt are in the dataset's ids, as PyG writes them (and as
    pyg_dist's API reads them); partition i's file lists the nodes partition i owns."""
    out = tmp_path / "Cora-partitions"
    _partition_cora(capsys, planetoid_root, out, 2)
    meta = io.read_meta(out)
    node_map = read_id_map(out)
    label = _load(tmp_path / "Cora-label" / "label.pt")
    assert label.shape == (cora.num_nodes,) and label.dtype == cora.y.dtype
    assert torch.equal(label, cora.y)  # dataset order
    offsets = meta.node_offsets["_N"]
    for split in ("train", "val", "test"):
        files = [tmp_path / f"Cora-{split}-partitions" / f"partition{p}.pt" for p in range(2)]
        ids = [_load(f) for f in files]
        for part, part_ids in enumerate(ids):
            assert part_ids.dtype == torch.long and part_ids.dim() == 1
            owned = set(node_map[offsets[part]:offsets[part + 1]].tolist())
            assert set(part_ids.tolist()) <= owned
        expected = torch.nonzero(cora[f"{split}_mask"]).view(-1)
        assert sorted(torch.cat(ids).tolist()) == sorted(expected.tolist())


def test_rerun_refuses_then_overwrites_and_drops_stale_files(planetoid_root: Path,
                                                             tmp_path: Path, capsys) -> None:
    out = tmp_path / "parts"  # no -partitions suffix: files are named after the dataset
    _partition_cora(capsys, planetoid_root, out, 3)
    train_dir = tmp_path / "Cora-train-partitions"
    assert sorted(p.name for p in train_dir.iterdir()) == [f"partition{i}.pt" for i in range(3)]
    (tmp_path / "elsewhere").mkdir()
    code, err = _cli(capsys, "--dataset", "Cora", "--root", str(planetoid_root),
                     "--num-parts", "2", "--out", str(tmp_path / "elsewhere" / ".." / "p2"),
                     "--pyg-extras")
    assert code == 2 and "label.pt exists" in err and "--overwrite" in err, err
    assert not (tmp_path / "p2").exists()
    _partition_cora(capsys, planetoid_root, out, 2, "--overwrite")
    assert sorted(p.name for p in train_dir.iterdir()) == ["partition0.pt", "partition1.pt"]
    node_map = read_id_map(out)
    offsets = io.read_meta(out).node_offsets["_N"]
    assert set(_load(train_dir / "partition1.pt").tolist()) <= set(node_map[offsets[1]:].tolist())
    assert _load(tmp_path / "Cora-label" / "label.pt").numel() == node_map.numel()


def test_hetero_extras_describe_the_labelled_type(tmp_path: Path, capsys) -> None:
    base = ["--dataset", "synthetic", "--hetero", "--num-nodes", "300", "--avg-degree", "4",
            "--feat-dim", "4", "--num-parts", "2"]
    out = tmp_path / "hs-partitions"
    code, err = _cli(capsys, *base, "--out", str(out), "--pyg-extras")
    assert code == 0, err
    node_map = read_id_map(out)["paper"]
    label = _load(tmp_path / "hs-label" / "label.pt")
    assert label.numel() == node_map.numel() == io.read_meta(out).num_nodes["paper"]
    code, err = _cli(capsys, *base, "--out", str(tmp_path / "o2"), "--pyg-extras",
                     "--pyg-extras-type", "author")
    assert code == 2 and "--pyg-extras-type author" in err and "'paper'" in err, err
    assert not (tmp_path / "o2").exists()  # refused before partitioning


def test_extras_usage_errors(planetoid_root: Path, tmp_path: Path, capsys, cora) -> None:
    cases = [
        (["--pyg-extras-type", "paper"], "--pyg-extras-type needs --pyg-extras"),
        (["--pyg-extras", "--pyg-extras-type", "paper"], "applies to heterogeneous graphs"),
    ]
    for extra, message in cases:
        code, err = _cli(capsys, "--dataset", "Cora", "--root", str(planetoid_root),
                         "--num-parts", "2", "--out", str(tmp_path / "o"), *extra)
        assert code == 2 and message in err and len(err.splitlines()) == 1, err
    unlabelled = tmp_path / "unlabelled.pt"
    torch.save({"edge_index": cora.edge_index, "x": cora.x}, unlabelled)
    code, err = _cli(capsys, "--dataset", str(unlabelled), "--num-parts", "2",
                     "--out", str(tmp_path / "o"), "--pyg-extras")
    assert code == 2 and "needs node labels y" in err, err
    assert not (tmp_path / "o").exists()


def test_layout_names(tmp_path: Path) -> None:
    assert extras_layout(tmp_path / "ogbn-products-partitions", "x").name == "ogbn-products"
    assert extras_layout(tmp_path / "parts", "Reddit").name == "Reddit"
    assert extras_layout(tmp_path / "parts", str(tmp_path / "g.pt")).name == "g"
    assert extras_layout(tmp_path / "-partitions", "Cora").name == "Cora"
    assert extras_layout(tmp_path / "a-partitions", "Cora").parent == tmp_path


@pytest.mark.parametrize("hetero", [False, True])
def test_out_of_core_extras_equal_the_in_memory_ones(tmp_path: Path, capsys, hetero) -> None:
    """``--memory-budget`` with ``--pyg-extras``: the same label and split files as the
    in-memory path writes for the same chunked graph (same assignment: random)."""
    from pyg_dist.chunked import write_chunked
    from pyg_dist.datasets import community_graph, hetero_community_graph

    data = hetero_community_graph(300, avg_degree=4, feat_dim=4, seed=0) if hetero else \
        community_graph(400, 6.0, 3, 3, seed=0)
    write_chunked(data, tmp_path / "chunks", chunk_size=37)
    base = ["--input", str(tmp_path / "chunks"), "--num-parts", "3", "--method", "random",
            "--pyg-extras"]
    for kind, extra in (("mem", []), ("ooc", ["--memory-budget", "1MB"])):
        (tmp_path / kind).mkdir()
        code, err = _cli(capsys, *base, "--out", str(tmp_path / kind / "g-partitions"), *extra)
        assert code == 0, err
    mem = tmp_path / "mem"
    extras = sorted(p.relative_to(mem) for p in mem.rglob("*.pt")
                    if p.relative_to(mem).parts[0] != "g-partitions")  # not the partitions
    assert any("label" in str(f) for f in extras) and any("train" in str(f) for f in extras)
    for name in extras:
        assert torch.equal(_load(tmp_path / "mem" / name), _load(tmp_path / "ooc" / name)), name
