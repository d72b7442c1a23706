"""Partition files are validated at load: a corrupted file gives an error naming it.

Each case writes one corrupted file into a copy of a small partition folder and
checks that loading raises :class:`PartitionFormatError` naming the file and the
problem, in this process (never a crash later, in sampling). A mapped store
(``mmap=True``) skips the per-edge checks at open; those cases raise naming the file
when sampling reads the bad ids instead.
"""
from __future__ import annotations

import copy
import json
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore, PartitionFormatError, Partitioner
from pyg_dist.datasets import community_graph, hetero_community_graph
from pyg_dist.format import _partition_io as io
from pyg_dist.format import PartitionMeta
from pyg_dist.sampler import LocalSampler
from pyg_dist._typing import HOMO_EDGE, edge_key
from forge import forge, reseal

HOMO = edge_key(HOMO_EDGE)
CITES = "paper__cites__paper"


@pytest.fixture(scope="module")
def homo_parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("valid") / "homo"
    graph = community_graph(400, avg_degree=6, feat_dim=4, num_classes=3, seed=2)
    Partitioner(graph, 2, root, progress=False).generate()
    return root


@pytest.fixture(scope="module")
def hetero_parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("valid") / "hetero"
    graph = hetero_community_graph(400, avg_degree=4, feat_dim=4, seed=3)
    Partitioner(graph, 2, root, progress=False).generate()
    return root


def _corrupt(src: Path, tmp_path: Path, name: str, edit: Callable[[Any], Any],
             part: int = 0) -> Path:
    """A copy of ``src`` whose ``part_<part>/<name>`` is replaced by ``edit(content)``."""
    root = tmp_path / "copy"
    shutil.copytree(src, root)
    path = io.part_dir(root, part) / name
    obj = torch.load(path, weights_only=True)
    forge(path, edit(obj))
    return root


def _set(obj: dict, keys: tuple, value: Any) -> dict:
    target = obj
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value(target[keys[-1]]) if callable(value) else value
    return obj


def _swap_middle(p: torch.Tensor) -> torch.Tensor:
    p = p.clone()
    p[1] = p[-1]  # a column that ends after the next one starts
    return p


def _bump(t: torch.Tensor, value: int, at: int = 3) -> torch.Tensor:
    t = t.clone()
    t[at] = value
    return t


GRAPH_CASES = {
    "non-monotonic indptr": (("csc", HOMO, "indptr"), _swap_middle, r"indptr.*non-decreasing"),
    "indptr not from 0": (("csc", HOMO, "indptr"), lambda p: _bump(p, 1, 0), r"indptr.*0"),
    "indptr short end": (("csc", HOMO, "indptr"), lambda p: _bump(p, int(p[-1]) - 1, -1),
                         r"indptr"),
    "indices too large": (("csc", HOMO, "indices"), lambda i: _bump(i, 400), r"indices.*range"),
    "indices negative": (("csc", HOMO, "indices"), lambda i: _bump(i, -1), r"indices.*range"),
    "indptr float": (("csc", HOMO, "indptr"), lambda p: p.double(), r"indptr.*int64"),
    "indices int16": (("csc", HOMO, "indices"), lambda i: i.to(torch.int16),
                      r"indices.*int64 or int32"),
    "indices 2-D": (("csc", HOMO, "indices"), lambda i: i.view(-1, 1), r"indices.*1-D"),
    "indices a list": (("csc", HOMO, "indices"), lambda i: i.tolist(), r"indices.*tensor"),
    "csc entry a tensor": (("csc", HOMO), lambda e: e["indptr"], r"csc.*dict"),
    "extra edge type": (("csc", "a__b__c"), {}, r"a__b__c.*META\.json"),
    "halo unsorted": (("halo", "_N"), lambda h: h.flip(0), r"halo.*sorted"),
    "halo owned id": (("halo", "_N"), lambda h: torch.cat([torch.tensor([0]), h]),
                      r"halo.*own"),
    "halo out of range": (("halo", "_N"), lambda h: torch.cat([h, torch.tensor([400])]),
                          r"halo.*range"),
    "halo int32": (("halo", "_N"), lambda h: h.int(), r"halo.*int64"),
    "halo misses a source": (("halo", "_N"), lambda h: h[1:], r"halo.*miss"),
    "halo of unknown type": (("halo", "nope"), torch.tensor([1]), r"halo.*nope"),
    "uid a number": (("uid",), 5, r"uid"),
}


#: cases a mapped store finds when sampling reads them, not at open (one pass per edge)
PER_EDGE = {"indices too large", "indices negative", "halo misses a source"}


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
@pytest.mark.parametrize("mmap", [False, True])
def test_corrupted_graph_file_is_named(homo_parts: Path, tmp_path: Path, case: str,
                                       mmap: bool) -> None:
    keys, value, message = GRAPH_CASES[case]
    root = _corrupt(homo_parts, tmp_path, io.GRAPH_FILE, lambda g: _set(g, keys, value))
    named = r"part_0/graph\.pt: .*" + message
    if not (mmap and case in PER_EDGE):
        with pytest.raises(PartitionFormatError, match=named):
            LocalGraphStore.from_partition(root, 0, mmap=mmap)
        return
    graph = LocalGraphStore.from_partition(root, 0, mmap=True)
    sampler = LocalSampler(graph, LocalFeatureStore.from_partition(root, 0))
    if "halo" in case:  # harmless without time: see test_mapped_halo_miss_is_named
        sampler.sample(HOMO_EDGE, graph.owned_nodes(), -1, False, 0)
        return
    with pytest.raises(PartitionFormatError, match=named.replace("range", "outside")):
        sampler.sample(HOMO_EDGE, graph.owned_nodes(), -1, False, 0)


def test_mapped_halo_miss_is_named(hetero_parts: Path, tmp_path: Path) -> None:
    """A halo node missing (with its time) is found when temporal sampling needs it."""
    def edit(graph: dict) -> dict:
        halo = graph["halo"]["paper"]
        keep = halo != graph["csc"][CITES]["indices"][torch.isin(
            graph["csc"][CITES]["indices"], halo)][0]  # a halo source of a citation
        graph["halo"]["paper"] = halo[keep]
        graph["halo_attrs"]["paper"]["time"] = graph["halo_attrs"]["paper"]["time"][keep]
        return graph

    root = _corrupt(hetero_parts, tmp_path, io.GRAPH_FILE, edit)
    with pytest.raises(PartitionFormatError, match=r"graph\.pt: .*halo.*miss"):
        LocalGraphStore.from_partition(root, 0, mmap=False)
    graph = LocalGraphStore.from_partition(root, 0, mmap=True)
    sampler = LocalSampler(graph, LocalFeatureStore.from_partition(root, 0))
    with pytest.raises(PartitionFormatError, match=r"part_0/graph\.pt: .*halo.*miss"):
        sampler._source_time(("paper", "cites", "paper"), "time")  # the source-time path


def test_graph_file_that_is_not_a_dict_is_named(homo_parts: Path, tmp_path: Path) -> None:
    root = _corrupt(homo_parts, tmp_path, io.GRAPH_FILE, lambda g: [g])
    with pytest.raises(PartitionFormatError, match=r"graph\.pt: .*dict"):
        LocalGraphStore.from_partition(root, 0)


def test_misaligned_halo_attrs_are_named(hetero_parts: Path, tmp_path: Path) -> None:
    def edit(graph: dict) -> dict:
        graph["halo_attrs"]["paper"]["time"] = graph["halo_attrs"]["paper"]["time"][1:]
        return graph

    root = _corrupt(hetero_parts, tmp_path, io.GRAPH_FILE, edit)
    with pytest.raises(PartitionFormatError, match=r"graph\.pt: .*halo_attrs.*time.*rows"):
        LocalGraphStore.from_partition(root, 0)


FEATURE_CASES = {
    "wider rows": (io.NODE_FEATS_FILE, ("_N", "x"), lambda x: torch.cat([x, x], 1),
                   r"'x'.*shape"),
    "other dtype": (io.NODE_FEATS_FILE, ("_N", "x"), lambda x: x.double(), r"'x'.*float32"),
    "fewer rows": (io.NODE_FEATS_FILE, ("_N", "y"), lambda y: y[1:], r"'y'.*rows"),
    "not a tensor": (io.NODE_FEATS_FILE, ("_N", "y"), lambda y: y.tolist(), r"'y'.*tensor"),
    "not in META": (io.NODE_FEATS_FILE, ("_N", "z"), torch.zeros(3), r"'z'.*META\.json"),
    "sparse": (io.NODE_FEATS_FILE, ("_N", "x"), lambda x: x.to_sparse(), r"'x'.*dense"),
    "split out of range": (io.SPLITS_FILE, ("_N", "train"), lambda s: _bump(s, 399, 0),
                           r"train.*owned"),
    "split float": (io.SPLITS_FILE, ("_N", "train"), lambda s: s.float(), r"train.*int64"),
    "split repeated": (io.SPLITS_FILE, ("_N", "train"), lambda s: torch.cat([s, s]),
                       r"train.*unique"),
    "split a list": (io.SPLITS_FILE, ("_N",), [1, 2], r"_N.*dict"),
    "split unknown type": (io.SPLITS_FILE, ("nope",), {}, r"nope"),
}


@pytest.mark.parametrize("case", sorted(FEATURE_CASES))
def test_corrupted_feature_file_is_named(homo_parts: Path, tmp_path: Path, case: str) -> None:
    name, keys, value, message = FEATURE_CASES[case]
    root = _corrupt(homo_parts, tmp_path, name, lambda d: _set(d, keys, value))
    with pytest.raises(PartitionFormatError, match=rf"part_0/{name}: .*" + message):
        LocalFeatureStore.from_partition(root, 0)


def test_missing_node_attribute_is_named(homo_parts: Path, tmp_path: Path) -> None:
    def edit(feats: dict) -> dict:
        del feats["_N"]["x"]
        return feats

    root = _corrupt(homo_parts, tmp_path, io.NODE_FEATS_FILE, edit)
    with pytest.raises(PartitionFormatError, match=r"node_feats\.pt: .*'x'.*missing"):
        LocalFeatureStore.from_partition(root, 0)


@pytest.mark.parametrize("edit,message", [
    (lambda d: _set(d, (CITES, "edge_weight"), lambda w: w.view(-1, 1)), r"edge_weight.*shape"),
    (lambda d: _set(d, ("nope",), {}), r"nope"),
    (lambda d: _set(d, (CITES,), torch.zeros(2)), r"dict"),
])
def test_corrupted_edge_feature_file_is_named(hetero_parts: Path, tmp_path: Path, edit,
                                              message: str) -> None:
    root = _corrupt(hetero_parts, tmp_path, io.EDGE_FEATS_FILE, edit, part=1)
    with pytest.raises(PartitionFormatError, match=r"part_1/edge_feats\.pt: .*" + message):
        LocalFeatureStore.from_partition(root, 1)


def test_non_contiguous_tensors_are_made_contiguous(homo_parts: Path, tmp_path: Path) -> None:
    def strided(t: torch.Tensor) -> torch.Tensor:
        wide = torch.stack([t, t], dim=-1)
        return wide[..., 0]  # same values, every other element of a larger storage

    root = _corrupt(homo_parts, tmp_path, io.NODE_FEATS_FILE,
                    lambda d: _set(d, ("_N", "x"), strided))
    path = io.part_dir(root, 0) / io.GRAPH_FILE
    graph = torch.load(path, weights_only=True)
    _set(graph, ("csc", HOMO, "indptr"), strided)
    forge(path, graph)
    assert not torch.load(path, weights_only=True)["csc"][HOMO]["indptr"].is_contiguous()
    fs = LocalFeatureStore.from_partition(root, 0)
    gs = LocalGraphStore.from_partition(root, 0)
    good = LocalFeatureStore.from_partition(homo_parts, 0)
    assert fs.tensor("_N", "x").is_contiguous() and gs.csc_by_type[HOMO_EDGE].indptr.is_contiguous()
    assert torch.equal(fs.tensor("_N", "x"), good.tensor("_N", "x"))


def test_truncated_and_unsafe_files_are_named(homo_parts: Path, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(homo_parts, root)
    path = io.part_dir(root, 1) / io.GRAPH_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    for store in (LocalGraphStore, LocalFeatureStore):
        with pytest.raises(PartitionFormatError, match=r"part_1/graph\.pt"):
            store.from_partition(root, 1)
    path = io.part_dir(root, 0) / io.NODE_FEATS_FILE
    forge(path, {"_N": {"x": Path("payload")}})  # a pickle of a non-allow-listed class
    with pytest.raises(PartitionFormatError, match=r"part_0/node_feats\.pt.*weights_only"):
        LocalFeatureStore.from_partition(root, 0)
    path.write_bytes(pickle.dumps({"_N": {}}, protocol=2))  # not a torch file at all
    reseal(path.parent)
    with pytest.raises(PartitionFormatError, match=r"part_0/node_feats\.pt"):
        LocalFeatureStore.from_partition(root, 0)


# ---- META.json field types ----------------------------------------------------------
def _homo_meta(root: Path) -> dict:
    return json.loads((root / io.META_FILE).read_text())


META_CASES = [
    ("num_parts", "2"), ("num_parts", True), ("num_parts", 2.0), ("num_parts", None),
    ("is_hetero", "no"), ("is_hetero", 0),
    ("node_types", "_N"), ("node_types", [1]), ("node_types", [["_N"]]),
    ("edge_types", [["_N", "_E"]]), ("edge_types", [["_N", "_E", 3]]), ("edge_types", "x"),
    ("edge_types", [None]),
    ("num_nodes", "400"), ("num_nodes", [400]), ("num_nodes", True),
    ("num_edges", 1.5), ("node_offsets", 5), ("node_offsets", [0, "200", 400]),
    ("node_offsets", [0, None, 400]), ("edge_offsets", None), ("edge_offsets", {"a": 1}),
    ("node_attrs", []), ("node_attrs", {"_N": []}), ("node_attrs", {"_N": {"x": "float32"}}),
    ("node_attrs", {"_N": {"x": {"dtype": "os.system", "shape": [4]}}}),
    ("node_attrs", {"_N": {"x": {"dtype": "float32", "shape": [-1]}}}),
    ("node_attrs", {"_N": {"x": {"dtype": "float32", "shape": "4"}}}),
    ("node_attrs", {"_N": {"x": {"dtype": "float32"}}}),
    ("node_attrs", {"_N": {"x": {"dtype": 5, "shape": [4]}}}),
    ("node_attrs", {"_N": {"x": {"dtype": "float32", "shape": [True]}}}),
    ("node_attrs", {"paper": {}}),
    ("edge_attrs", {"nope": {}}), ("edge_attrs", {"_N___E___N": {"w": {"dtype": "Tensor",
                                                                       "shape": []}}}),
    ("splits", "train"), ("splits", [1]), ("method", 3), ("seed", "0"), ("seed", False),
    ("parts", "x"), ("parts", [1]), ("parts", [{"owned_nodes": "x"}]),
    ("uid", 5), ("uid", "not-hex"), ("uid", ""),
]


@pytest.mark.parametrize("field,value", META_CASES,
                         ids=[f"{f}={v!r}" for f, v in META_CASES])
def test_meta_field_of_wrong_type_is_named(homo_parts: Path, field: str, value: Any) -> None:
    obj = _homo_meta(homo_parts)
    obj[field] = value
    with pytest.raises(PartitionFormatError, match=rf"/x/META\.json: .*{field}"):
        PartitionMeta.from_json(obj, source="/x/META.json")


@pytest.mark.parametrize("field,value", [
    ("num_nodes", 400), ("num_nodes", {"paper": "1"}), ("num_edges", {"a_b": 1}),
    ("node_offsets", {"paper": [0, 1.5, 400]}), ("edge_offsets", [0, 1]),
])
def test_hetero_meta_field_of_wrong_type_is_named(hetero_parts: Path, field: str,
                                                  value: Any) -> None:
    obj = _homo_meta(hetero_parts)
    obj[field] = value
    with pytest.raises(PartitionFormatError, match=rf"META\.json: .*{field}"):
        PartitionMeta.from_json(obj, source="META.json")


def test_meta_that_is_not_an_object_and_wrong_file_types(homo_parts: Path,
                                                         tmp_path: Path) -> None:
    with pytest.raises(PartitionFormatError, match="JSON object"):
        PartitionMeta.from_json([1, 2], source="META.json")  # type: ignore[arg-type]
    root = tmp_path / "copy"
    shutil.copytree(homo_parts, root)
    obj = _homo_meta(root)
    obj["node_offsets"] = [0, "200", 400]
    (root / io.META_FILE).write_text(json.dumps(obj))
    with pytest.raises(PartitionFormatError, match=rf"{root}/META\.json: .*node_offsets"):
        LocalGraphStore.from_partition(root, 0)


def test_valid_meta_still_reads(homo_parts: Path, hetero_parts: Path) -> None:
    for root in (homo_parts, hetero_parts):
        obj = _homo_meta(root)
        assert PartitionMeta.from_json(copy.deepcopy(obj)).to_json() == obj
