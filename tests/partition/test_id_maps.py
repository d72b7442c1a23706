"""Format v2 keeps each partition's original ids in its folder; v1 folders (one map at
the root) are still read, and both give the same ids."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.format import _partition_io as io
from pyg_dist.format import PartitionFormatError
from pyg_dist.format import read_id_map, read_part_ids
from forge import forge, strip_digests


@pytest.fixture(scope="module", params=["homo", "hetero"])
def v2(request, cora, hetero_graph, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("idmaps") / request.param
    Partitioner(cora if request.param == "homo" else hetero_graph, 3, root,
                progress=False).generate()
    return root


def _as_v1(v2: Path, out: Path) -> Path:
    """The same partitioning as version 1 wrote it: whole maps at the root."""
    shutil.copytree(v2, out)
    for kind, name in (("node", io.NODE_MAP_FILE), ("edge", io.EDGE_MAP_FILE)):
        torch.save(read_id_map(v2, kind), out / name)
    for p in range(3):
        for f in io.ID_FILES:
            (io.part_dir(out, p) / f).unlink()
    strip_digests(out)
    meta = json.loads((out / io.META_FILE).read_text())
    (out / io.META_FILE).write_text(json.dumps({**meta, "version": 1}))
    return out


def test_v2_keeps_ids_per_partition(v2: Path) -> None:
    meta = io.read_meta(v2)
    assert meta.version == 2 and not (v2 / io.NODE_MAP_FILE).exists()
    for kind, types, offsets, totals in (("node", meta.node_types, meta.node_offsets, meta.num_nodes),
                                         ("edge", meta.edge_types, meta.edge_offsets, meta.num_edges)):
        parts = [read_part_ids(v2, meta, p, kind) for p in range(3)]
        for t in types:
            ids = torch.cat([p[t] for p in parts])  # every original id exactly once
            assert torch.equal(torch.sort(ids).values, torch.arange(totals[t]))
            assert [p[t].numel() for p in parts] == \
                [b - a for a, b in zip(offsets[t], offsets[t][1:])]


def test_v1_folders_read_the_same(v2: Path, tmp_path: Path) -> None:
    v1 = _as_v1(v2, tmp_path / "v1")
    meta1, meta2 = io.read_meta(v1), io.read_meta(v2)
    assert meta1.version == 1 and meta1.uid == meta2.uid
    for kind in ("node", "edge"):
        for p in range(3):
            a, b = read_part_ids(v1, meta1, p, kind), read_part_ids(v2, meta2, p, kind)
            assert all(torch.equal(a[t], b[t]) for t in b)
    for p in range(3):  # stores open both
        assert LocalGraphStore.from_partition(v1, p).meta.version == 1
        LocalFeatureStore.from_partition(v1, p)


@pytest.mark.parametrize("edit,match", [
    (lambda ids: ids[:-1], "ids, expected"),
    (lambda ids: ids.short(), "int64 or int32"),
    (lambda ids: ids.double(), "int64 or int32"),
    (lambda ids: ids + 10**9, "outside"),
    (lambda ids: "text", "tensor|dict"),
])
def test_bad_id_files_are_named(v2: Path, tmp_path: Path, edit, match) -> None:
    root = tmp_path / "bad"
    shutil.copytree(v2, root)
    path = io.part_dir(root, 1) / io.NODE_IDS_FILE
    value = torch.load(path, weights_only=True)
    value = {k: edit(v) for k, v in value.items()} if isinstance(value, dict) else edit(value)
    forge(path, value)
    with pytest.raises(PartitionFormatError, match=match) as info:
        read_part_ids(root, io.read_meta(root), 1)
    assert "part_1/node_ids.pt" in str(info.value)


def test_id_files_hold_int32_where_ids_fit_and_int64_files_still_read(
        v2: Path, tmp_path: Path) -> None:
    """Id files are written as int32 when every id fits (4 bytes per node and edge on
    every machine); readers give int64 unless asked for the ids as stored, and read
    files that hold int64 (written before) as before."""
    meta = io.read_meta(v2)
    for name in io.ID_FILES:
        value = torch.load(io.part_dir(v2, 0) / name, weights_only=True)
        for ids in (value.values() if isinstance(value, dict) else [value]):
            assert ids.dtype == torch.int32
    stored = read_part_ids(v2, meta, 0, "edge", as_stored=True)
    wide = read_part_ids(v2, meta, 0, "edge")
    assert all(stored[t].dtype == torch.int32 and wide[t].dtype == torch.int64
               and torch.equal(stored[t].long(), wide[t]) for t in wide)
    assert io.narrow_ids(torch.tensor([0, 2**31 - 1])).dtype == torch.int32
    assert io.narrow_ids(torch.tensor([0, 2**31])).dtype == torch.int64  # does not fit
    root = tmp_path / "int64"
    shutil.copytree(v2, root)
    for name in io.ID_FILES:
        path = io.part_dir(root, 1) / name
        value = torch.load(path, weights_only=True)
        forge(path, {k: v.long() for k, v in value.items()} if isinstance(value, dict)
              else value.long())
    for kind in ("node", "edge"):
        old, new = read_part_ids(root, meta, 1, kind, as_stored=True), \
            read_part_ids(v2, meta, 1, kind)
        assert all(old[t].dtype == torch.int64 and torch.equal(old[t], new[t]) for t in new)


def test_missing_id_file_is_named(v2: Path, tmp_path: Path) -> None:
    root = tmp_path / "missing"
    shutil.copytree(v2, root)
    (io.part_dir(root, 2) / io.EDGE_IDS_FILE).unlink()
    meta = io.read_meta(root)
    with pytest.raises(PartitionFormatError, match="edge_ids.pt"):
        read_part_ids(root, meta, 2, "edge")
    with pytest.raises(PartitionFormatError, match="missing edge_ids.pt"):
        io.check_part(root, meta, 2)
