"""Content integrity of partition folders: a digest per file, recorded at write time.

A byte flipped in place (same size) in any kind of partition file is refused by a
private load, by ``verify=True`` and by ``pyg-dist-verify``, naming the file; a mapped
default open stays constant-time (no digest); folders written before digests load.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Dict

import pytest
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore, PartitionFormatError, Partitioner
from pyg_dist.cli.verify import main as verify_main
from pyg_dist.datasets import community_graph
from pyg_dist.format import _partition_io as io, _part_manifest as manifest
from pyg_dist.format._digest import file_digest
from pyg_dist.format import read_part_ids
from pyg_dist.format._part_manifest import MANIFEST_FILE, PartitionDigestError
from pyg_dist._typing import HOMO_EDGE, edge_key
from forge import strip_digests

HOMO_KEY = edge_key(HOMO_EDGE)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("integrity") / "homo"
    data = community_graph(300, 5.0, 4, 3, seed=0)
    data.edge_attr = torch.randn(data.edge_index.size(1), 3,
                                 generator=torch.Generator().manual_seed(1))
    Partitioner(data, 2, root, progress=False).generate()
    return root


def _copy(parts: Path, tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(parts, root)
    return root


def _value(root: Path, name: str, pick: Callable) -> torch.Tensor:
    return pick(torch.load(io.part_dir(root, 0) / name, weights_only=True))


#: file kind -> (file, the tensor in it whose bytes are flipped)
KINDS: Dict[str, tuple] = {
    "graph": (io.GRAPH_FILE, lambda g: g["csc"][HOMO_KEY]["indices"]),
    "node features": (io.NODE_FEATS_FILE, lambda f: f["_N"]["x"]),
    "labels": (io.NODE_FEATS_FILE, lambda f: f["_N"]["y"]),
    "edge features": (io.EDGE_FEATS_FILE, lambda f: f[HOMO_KEY]["edge_attr"]),
    "splits": (io.SPLITS_FILE, lambda s: s["_N"]["train"]),
    "node ids": (io.NODE_IDS_FILE, lambda ids: ids),
    "edge ids": (io.EDGE_IDS_FILE, lambda ids: ids),
}


def flip_in_place(path: Path, tensor: torch.Tensor) -> None:
    """Flips one bit in the stored bytes of ``tensor`` inside ``path`` (same size)."""
    data = bytearray(path.read_bytes())
    raw = tensor.contiguous().numpy().tobytes()
    at = bytes(data).find(raw)
    assert at >= 0 and len(raw) >= 8, f"{path}: tensor bytes not found"
    data[at + len(raw) // 2] ^= 0x01
    size = path.stat().st_size
    path.write_bytes(bytes(data))
    assert path.stat().st_size == size


def _loads(kind: str, root: Path) -> Dict[str, Callable[[], object]]:
    """The private load and the ``verify=True`` open that read a file of ``kind``."""
    name = KINDS[kind][0]
    if name == io.GRAPH_FILE:
        return {"private": lambda: LocalGraphStore.from_partition(root, 0, mmap=False),
                "verify": lambda: LocalGraphStore.from_partition(root, 0, verify=True)}
    if name in (io.NODE_IDS_FILE, io.EDGE_IDS_FILE):  # only ever mapped
        which = "node" if name == io.NODE_IDS_FILE else "edge"
        return {"verify": lambda: read_part_ids(root, io.read_meta(root), 0, which,
                                                verify=True),
                "verify graph": lambda: LocalGraphStore.from_partition(root, 0, verify=True),
                "verify features": lambda: LocalFeatureStore.from_partition(root, 0,
                                                                            verify=True)}
    return {"private": lambda: LocalFeatureStore.from_partition(root, 0, mmap=False),
            "verify": lambda: LocalFeatureStore.from_partition(root, 0, verify=True)}


def test_every_file_is_recorded(parts: Path) -> None:
    meta = json.loads((parts / io.META_FILE).read_text())
    assert meta["digests"] == "blake2b-128"
    for part in range(2):
        folder = io.part_dir(parts, part)
        doc = json.loads((folder / MANIFEST_FILE).read_text())
        assert doc["part"] == part and doc["uid"] == meta["uid"]
        assert set(doc["files"]) == set(io.PART_FILES + io.ID_FILES)
        for name, entry in doc["files"].items():
            assert entry == {"size": (folder / name).stat().st_size,
                             "digest": file_digest(folder / name)}


def test_same_graph_gives_same_digests(parts: Path, tmp_path: Path) -> None:
    """Files no longer embed their temporary name: equal content, equal bytes."""
    data = community_graph(300, 5.0, 4, 3, seed=0)
    data.edge_attr = torch.randn(data.edge_index.size(1), 3,
                                 generator=torch.Generator().manual_seed(1))
    Partitioner(data, 2, tmp_path / "again", progress=False).generate()
    for part in range(2):
        assert (io.part_dir(tmp_path / "again", part) / MANIFEST_FILE).read_text() == \
            (io.part_dir(parts, part) / MANIFEST_FILE).read_text()


@pytest.mark.parametrize("kind", list(KINDS))
def test_byte_flipped_in_place_is_detected(parts: Path, tmp_path: Path, kind: str,
                                           capsys: pytest.CaptureFixture) -> None:
    root = _copy(parts, tmp_path)
    name, pick = KINDS[kind]
    path = io.part_dir(root, 0) / name
    for load in _loads(kind, root).values():
        load()  # intact: loads
    flip_in_place(path, _value(root, name, pick))
    for how, load in _loads(kind, root).items():
        with pytest.raises(PartitionDigestError, match=rf"{path}: contents differ") as info:
            load()
        assert isinstance(info.value, PartitionFormatError), how
    capsys.readouterr()
    assert verify_main([str(root)]) == 1
    out = capsys.readouterr().out
    assert f"{path}: contents differ" in out
    assert str(io.part_dir(root, 1)) not in out  # the intact partition is not blamed


def test_mapped_default_open_computes_no_digest(parts: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(parts, tmp_path)
    flip_in_place(io.part_dir(root, 0) / io.NODE_FEATS_FILE,
                  _value(root, io.NODE_FEATS_FILE, KINDS["node features"][1]))
    checked = []
    real = manifest.check_file
    monkeypatch.setattr(manifest, "check_file",
                        lambda path, expected: (checked.append(Path(path).name),
                                                real(path, expected)))
    LocalGraphStore.from_partition(root, 0)
    LocalFeatureStore.from_partition(root, 0)  # the flip is in a mapped file: not read
    assert checked == [io.SPLITS_FILE]  # read privately in full anyway, so checked
    with pytest.raises(PartitionDigestError, match="node_feats.pt"):
        LocalFeatureStore.from_partition(root, 0, verify=True)


def test_size_change_is_refused_by_a_mapped_open(parts: Path, tmp_path: Path) -> None:
    root = _copy(parts, tmp_path)
    path = io.part_dir(root, 1) / io.GRAPH_FILE
    with open(path, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(PartitionFormatError, match=rf"{path}: \d+ bytes, but \d+ were written"):
        LocalGraphStore.from_partition(root, 1)


def test_missing_or_foreign_manifest_is_refused(parts: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    root = _copy(parts, tmp_path)
    shutil.copy(io.part_dir(root, 0) / MANIFEST_FILE, io.part_dir(root, 1) / MANIFEST_FILE)
    with pytest.raises(PartitionFormatError, match=r"part_1/MANIFEST\.json: describes "
                                                   r"partition 0"):
        LocalGraphStore.from_partition(root, 1)
    (io.part_dir(root, 1) / MANIFEST_FILE).unlink()
    with pytest.raises(PartitionFormatError, match=r"part_1/MANIFEST\.json is missing"):
        LocalFeatureStore.from_partition(root, 1)
    assert verify_main([str(root)]) == 1
    assert "part_1/MANIFEST.json is missing" in capsys.readouterr().out


def test_folder_written_before_digests_still_loads(parts: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    root = _copy(parts, tmp_path)
    strip_digests(root)
    for mmap in (True, False):
        LocalGraphStore.from_partition(root, 0, mmap=mmap, verify=True)
        LocalFeatureStore.from_partition(root, 1, mmap=mmap, verify=True)
    assert verify_main([str(root)]) == 0
    assert "before pyg_dist recorded digests" in capsys.readouterr().err


def test_verify_cli_usage_and_damage(parts: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture) -> None:
    assert verify_main([str(parts)]) == 0
    assert "OK (12 file(s)" in capsys.readouterr().out
    for bad in (tmp_path / "nowhere", parts / io.META_FILE, tmp_path):
        assert verify_main([str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("pyg-dist-verify: error:") and "\n" not in err
    assert verify_main([]) == 2
    root = _copy(parts, tmp_path)
    (io.part_dir(root, 1) / io.SPLITS_FILE).unlink()
    (root / "part_0" / io.EDGE_IDS_FILE).write_bytes(b"")
    assert verify_main([str(root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(str(io.part_dir(root, 1) / io.SPLITS_FILE)) for line in out)
    assert any(line.startswith(str(io.part_dir(root, 0) / io.EDGE_IDS_FILE)) for line in out)
    (root / io.META_FILE).write_text("{")
    assert verify_main([str(root)]) == 1
    assert "META.json is not valid JSON" in capsys.readouterr().out


def _set_ids(root: Path, part: int, name: str, edit: Callable[[torch.Tensor], None]) -> Path:
    """Edits partition ``part``'s id file in place and reseals it (a consistent but
    wrong folder: only a content check can catch it)."""
    from forge import forge

    path = io.part_dir(root, part) / name
    ids = torch.load(path, weights_only=True).clone()
    edit(ids)
    forge(path, ids)
    return path


@pytest.mark.parametrize("case", ["node ids within", "node ids across", "edge ids within",
                                  "edge ids across"])
def test_verify_refuses_duplicate_original_ids(parts: Path, tmp_path: Path, case: str,
                                               capsys: pytest.CaptureFixture) -> None:
    """Every original id of a type is held once by one partition: an id repeated in one
    file, or held by two partitions (each file alone in range and of the right
    length), is a problem naming the file."""
    root = _copy(parts, tmp_path)
    name = io.NODE_IDS_FILE if case.startswith("node") else io.EDGE_IDS_FILE
    if case.endswith("within"):
        path = _set_ids(root, 0, name, lambda ids: ids.__setitem__(1, ids[0]))
        dup = int(torch.load(path, weights_only=True)[0])
    else:
        dup = int(torch.load(io.part_dir(root, 0) / name, weights_only=True)[0])
        path = _set_ids(root, 1, name, lambda ids: ids.__setitem__(0, dup))
    capsys.readouterr()
    assert verify_main([str(root)]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith(str(path)))
    assert f"id {dup}" in line and ("more than once" in line or "another partition" in line)
    assert verify_main([str(parts)]) == 0  # the intact folder still passes
