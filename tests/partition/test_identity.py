"""Every partitioning has a content-derived ``uid``, recorded in META and each graph.pt."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore, PartitionFormatError, Partitioner
from pyg_dist.datasets import community_graph
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map
from forge import forge, strip_digests

HEX64 = re.compile(r"[0-9a-f]{64}")


@pytest.fixture(scope="module")
def graph():
    return community_graph(600, avg_degree=6, feat_dim=4, num_classes=3, seed=5)


@pytest.fixture(scope="module")
def runs(graph, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Three METIS runs into 3 parts: seed 1 twice, seed 2 once."""
    base = tmp_path_factory.mktemp("uid")
    out = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        out[name] = (base / name,
                     Partitioner(graph, 3, base / name, seed=seed, progress=False).generate())
    return out


def _graph_pt(root: Path, part: int) -> dict:
    return torch.load(io.part_dir(root, part) / io.GRAPH_FILE, weights_only=True)


def test_uid_is_recorded_deterministic_and_differs_between_seeds(runs: dict) -> None:
    (root_a, meta_a), (_, meta_b), (root_c, meta_c) = runs["a"], runs["b"], runs["c"]
    assert HEX64.fullmatch(meta_a.uid), meta_a.uid
    assert meta_a.uid == meta_b.uid  # same data + seed: same uid
    assert meta_a.uid != meta_c.uid  # another seed: another partitioning
    assert not torch.equal(read_id_map(root_a),
                           read_id_map(root_c))
    assert json.loads((root_a / io.META_FILE).read_text())["uid"] == meta_a.uid
    assert io.read_meta(root_a).uid == meta_a.uid
    for part in range(3):
        assert _graph_pt(root_a, part)["uid"] == meta_a.uid
        assert LocalGraphStore.from_partition(root_a, part).meta.uid == meta_a.uid
        assert LocalFeatureStore.from_partition(root_a, part).meta.uid == meta_a.uid


def test_uid_depends_on_the_maps_not_only_on_meta() -> None:
    from pyg_dist.format._identity import part_digest, partition_uid

    def uid(parts, edges=None):
        return partition_uid(fields, [part_digest({"_N": torch.tensor(p)}, edges or {})
                                      for p in parts])

    fields = {"num_parts": 2, "node_offsets": [0, 2, 4]}
    first, again = uid([[0, 1], [2, 3]]), uid([[0, 1], [2, 3]])
    other = uid([[1, 0], [2, 3]])
    moved = uid([[0, 2], [1, 3]])  # the same ids, another partition
    edges = uid([[0, 1], [2, 3]], {("_N", "_E", "_N"): torch.tensor([1, 0])})
    assert first == again and len({first, other, moved, edges}) == 4


def test_partition_folder_from_another_run_is_refused(runs: dict, tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    shutil.copytree(runs["a"][0], root)
    shutil.rmtree(io.part_dir(root, 1))
    shutil.copytree(io.part_dir(runs["c"][0], 1), io.part_dir(root, 1))
    for store in (LocalGraphStore, LocalFeatureStore):
        with pytest.raises(PartitionFormatError, match=r"part_1/graph\.pt.*uid"):
            store.from_partition(root, 1)
        store.from_partition(root, 0)  # the partitions of this run still load


def test_same_shaped_partition_of_another_seed_is_refused(tmp_path: Path) -> None:
    """Every node has in-degree 3 and the random method deals nodes evenly, so two
    seeds give partitions of identical sizes: only the uid tells them apart."""
    from torch_geometric.data import Data

    n = 200
    dst = torch.arange(n).repeat(3)
    src = (dst + torch.arange(1, 4).repeat_interleave(n)) % n
    graph = Data(x=torch.arange(n, dtype=torch.float32).view(-1, 1),
                 edge_index=torch.stack([src, dst]), num_nodes=n)
    for name, seed in (("a", 1), ("b", 2)):
        Partitioner(graph, 2, tmp_path / name, method="random", seed=seed,
                    progress=False).generate()
    shutil.rmtree(io.part_dir(tmp_path / "a", 1))
    shutil.copytree(io.part_dir(tmp_path / "b", 1), io.part_dir(tmp_path / "a", 1))
    for store in (LocalGraphStore, LocalFeatureStore):
        with pytest.raises(PartitionFormatError, match=r"part_1/graph\.pt.*uid"):
            store.from_partition(tmp_path / "a", 1)


def test_graph_file_without_uid_in_a_folder_with_one_is_refused(runs: dict,
                                                                tmp_path: Path) -> None:
    root = tmp_path / "old_part"
    shutil.copytree(runs["a"][0], root)
    path = io.part_dir(root, 2) / io.GRAPH_FILE
    graph = torch.load(path, weights_only=True)
    del graph["uid"]
    forge(path, graph)
    for store in (LocalGraphStore, LocalFeatureStore):
        with pytest.raises(PartitionFormatError, match=r"part_2/graph\.pt.*uid"):
            store.from_partition(root, 2)


def test_folders_without_uid_still_load_with_a_fallback(runs: dict, tmp_path: Path) -> None:
    """A folder written before uids existed: META.json and graph.pt carry none."""
    root = tmp_path / "legacy"
    shutil.copytree(runs["a"][0], root)
    strip_digests(root)  # written before uids, so before digests too
    meta = json.loads((root / io.META_FILE).read_text())
    del meta["uid"]
    (root / io.META_FILE).write_text(json.dumps(meta, indent=1))
    for part in range(3):
        path = io.part_dir(root, part) / io.GRAPH_FILE
        graph = torch.load(path, weights_only=True)
        del graph["uid"]
        torch.save(graph, path)
    canonical = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha256(canonical.encode()).hexdigest()
    assert io.read_meta(root).uid == expected
    for part in range(3):
        assert LocalGraphStore.from_partition(root, part).meta.uid == expected
        assert LocalFeatureStore.from_partition(root, part).meta.uid == expected
    # the fallback is a function of the document, not of its formatting
    (root / io.META_FILE).write_text(json.dumps(meta))
    assert io.read_meta(root).uid == expected


def test_meta_without_uid_and_graph_file_with_one_is_refused(runs: dict,
                                                             tmp_path: Path) -> None:
    root = tmp_path / "half"
    shutil.copytree(runs["a"][0], root)
    meta = json.loads((root / io.META_FILE).read_text())
    del meta["uid"]
    (root / io.META_FILE).write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"part_0/graph\.pt.*uid"):
        LocalGraphStore.from_partition(root, 0)
