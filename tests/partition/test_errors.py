"""Bad input gets a clear error naming the problem; writes are atomic; loads are safe."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore, PartitionFormatError, Partitioner
from pyg_dist.cli.partition import main
from pyg_dist.format import _partition_io as io
from forge import forge


@pytest.fixture(scope="module")
def cora_parts(cora, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cora2") / "parts"
    Partitioner(cora, 2, root, progress=False).generate()
    return root


def _cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


def test_cli_bad_inputs(planetoid_root: Path, tmp_path: Path, capsys) -> None:
    cases = [
        (["--dataset", "Nope", "--root", str(planetoid_root)], "unknown dataset 'Nope'"),
        (["--dataset", "Cora", "--root", str(tmp_path / "missing")], "does not exist"),
        (["--dataset", "Cora"], "--root is required"),
        (["--dataset", "CiteSeer", "--root", str(planetoid_root)], "ind.citeseer.x is missing"),
        (["--dataset", "Cora", "--root", str(planetoid_root), "--method", "random",
          "--coarsen"], "coarsen=True applies to method='metis'"),
    ]
    for extra, message in cases:
        code, err = _cli(capsys, *extra, "--num-parts", "2", "--out", str(tmp_path / "o"))
        assert code == 2 and message in err and len(err.splitlines()) == 1, err
    for parts, message in (("0", "--num-parts must be >= 1"), ("5000", "larger than")):
        code, err = _cli(capsys, "--dataset", "Cora", "--root", str(planetoid_root),
                         "--num-parts", parts, "--out", str(tmp_path / "o"))
        assert code == 2 and message in err, err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("user data")
    code, err = _cli(capsys, "--dataset", "Cora", "--root", str(planetoid_root),
                     "--num-parts", "2", "--out", str(tmp_path / "full"))
    assert code == 2 and "not empty" in err and "--overwrite" in err
    assert (tmp_path / "full" / "keep.txt").read_text() == "user data"


def test_cli_partitions_and_prints_table(planetoid_root: Path, tmp_path: Path, capsys) -> None:
    code = main(["--dataset", "cora", "--root", str(planetoid_root), "--num-parts", "2",
                 "--out", str(tmp_path / "o"), "--quiet", "--method", "random", "--seed", "3"])
    out = capsys.readouterr().out
    assert code == 0 and "cut %" in out and len(out.strip().splitlines()) == 4
    meta = io.read_meta(tmp_path / "o")
    assert meta.method == "random" and meta.seed == 3 and meta.num_nodes == {"_N": 2708}


def test_cli_saved_graph_file(cora, hetero_graph, tmp_path: Path, capsys) -> None:
    from torch_geometric.data import Data, HeteroData

    fresh = (("homo.pt", Data.from_dict(cora.to_dict())),
             ("hetero.pt", HeteroData.from_dict(hetero_graph.to_dict())),
             ("homo_dict.pt", cora.to_dict()), ("hetero_dict.pt", hetero_graph.to_dict()))
    for name, graph in fresh:
        torch.save(graph, tmp_path / name)
        code = main(["--dataset", str(tmp_path / name), "--num-parts", "2", "--quiet",
                     "--out", str(tmp_path / f"out_{name}")])
        assert code == 0, capsys.readouterr().err
        assert io.read_meta(tmp_path / f"out_{name}").is_hetero == name.startswith("hetero")


def test_cli_graph_file_with_filled_attr_cache_names_the_fix(cora, tmp_path: Path,
                                                             capsys) -> None:
    from torch_geometric.data import Data

    graph = Data.from_dict(cora.to_dict())
    assert graph.is_node_attr("x")  # fills PyG's defaultdict attribute cache
    torch.save(graph, tmp_path / "g.pt")
    code = main(["--dataset", str(tmp_path / "g.pt"), "--num-parts", "2", "--quiet",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "to_dict()" in err and "g.pt" in err, err


def test_refuses_wrong_version_and_missing_files(cora_parts: Path, tmp_path: Path) -> None:
    import shutil
    root = tmp_path / "copy"
    shutil.copytree(cora_parts, root)
    meta = json.loads((root / "META.json").read_text())
    (root / "META.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(PartitionFormatError, match="version 99"):
        LocalGraphStore.from_partition(root, 0)
    (root / "META.json").write_text(json.dumps({**meta, "format": "dgl"}))
    with pytest.raises(PartitionFormatError, match="not a pyg_dist partition"):
        LocalFeatureStore.from_partition(root, 0)
    (root / "META.json").write_text(json.dumps({k: v for k, v in meta.items()
                                                if k != "node_offsets"}))
    with pytest.raises(PartitionFormatError, match="node_offsets"):
        LocalGraphStore.from_partition(root, 0)
    (root / "META.json").write_text(json.dumps(meta))
    (root / "part_1" / "node_feats.pt").unlink()
    with pytest.raises(PartitionFormatError, match="part_1 is missing node_feats.pt"):
        LocalFeatureStore.from_partition(root, 1)
    with pytest.raises(ValueError, match="partition id 2 is out of range"):
        LocalGraphStore.from_partition(root, 2)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LocalGraphStore.from_partition(tmp_path / "nowhere", 0)


def test_refuses_files_that_would_run_code(cora_parts: Path, tmp_path: Path) -> None:
    import shutil
    root = tmp_path / "copy"
    shutil.copytree(cora_parts, root)
    forge(root / "part_0" / "graph.pt", {"csc": {}, "payload": Path("x")})
    with pytest.raises(PartitionFormatError, match="weights_only=True"):
        LocalGraphStore.from_partition(root, 0)


def test_feature_store_rejects_ids_it_does_not_own(cora_parts: Path) -> None:
    fs = LocalFeatureStore.from_partition(cora_parts, 0)
    gs = LocalGraphStore.from_partition(cora_parts, 0)
    first_foreign = gs.node_book().start(1)
    with pytest.raises(ValueError, match="does not own"):
        fs.gather("_N", "x", torch.tensor([0, first_foreign]))  # relabelled ids
    foreign = LocalFeatureStore.from_partition(cora_parts, 1)._global_id[None][:1]
    with pytest.raises(ValueError, match="index holds original id .* does not own"):
        fs.get_tensor(None, "x", foreign)
    with pytest.raises(KeyError, match="no attribute 'nope'|unknown"):
        fs.tensor("_N", "nope")
    ids = fs._global_id[None][[1, 0]]  # original ids of rows 1 and 0
    rows = fs.get_tensor(None, "x", ids)
    assert torch.equal(rows, fs.get_tensor(None, "x", None)[[1, 0]])
    fs.put_tensor(torch.ones(2, rows.size(1)), None, "x", ids)
    assert bool((fs.get_tensor(None, "x", ids) == 1).all())


def test_crash_leaves_no_half_written_folder(cora, tmp_path: Path, monkeypatch) -> None:
    calls = {"n": 0}
    real_save = io.save_pt

    def failing_save(obj, path):
        calls["n"] += 1
        if calls["n"] == 6:
            raise OSError("disk full (simulated)")
        real_save(obj, path)

    monkeypatch.setattr(io, "save_pt", failing_save)
    with pytest.raises(OSError, match="simulated"):
        Partitioner(cora, 2, tmp_path / "out", progress=False).generate()
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []


def test_node_attribute_with_wrong_row_count_is_an_error(tmp_path: Path) -> None:
    """It used to be dropped with only a warning."""
    from torch_geometric.data import Data

    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    data = Data(x=torch.randn(5, 2), edge_index=edge_index, num_nodes=6)
    with pytest.raises(ValueError, match=r"node attribute 'x' has 5 rows \(shape \(5, 2\)\), "
                                         r"expected 6 \(one per node"):
        Partitioner(data, 2, tmp_path / "out", progress=False)
    data = Data(x=torch.randn(6, 2), edge_index=edge_index, num_nodes=6,
                edge_weight=torch.ones(2))
    with pytest.raises(ValueError, match=r"edge attribute 'edge_weight' has 2 rows .*"
                                         r"expected 3"):
        Partitioner(data, 2, tmp_path / "out", progress=False)
    data = Data(x=torch.randn(6, 2), edge_index=edge_index, num_nodes=6,
                class_weights=torch.ones(4))
    with pytest.warns(UserWarning, match="'class_weights'.*graph-level"):
        Partitioner(data, 2, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
