"""Checkpoints from elsewhere: loading one runs no code, a damaged one raises
:class:`CheckpointError` naming the file (never "no checkpoint", never torch's
``CheckpointException`` or a bare ``EOFError``), and a byte changed in place in any file
is detected by the digests recorded at save time.

A code-running file is a pickle whose unpickling creates a marker file; the tests also
re-record the digests of the edited version (whoever can edit a checkpoint can), so that
what stops the code is the loader, not the digest.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from pyg_dist import DistEmbedding, SparseAdam, checkpoint
from pyg_dist.checkpoint import CheckpointError, _files as files


class Payload:
    """Unpickling it creates ``marker`` (stands in for arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return open, (self.marker, "w")


def _model(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    opt.zero_grad()
    model(torch.randn(8, 5)).pow(2).sum().backward()
    opt.step()
    return model, opt


def _save(path: Path, name: str = "trust_emb") -> Path:
    """A checkpoint of every kind of file but loader states; returns its version folder."""
    model, opt = _model(0)
    emb = DistEmbedding(20, 3, name=name)
    sparse = SparseAdam([emb], lr=0.1)
    emb(torch.arange(5)).sum().backward()
    sparse.step()
    return path / checkpoint.save(path, step=1, state={"model": model, "optimizer.0": opt,
                                                       f"embeddings.{emb.name}": emb,
                                                       "sparse_optimizers.0": sparse})


def _resign(folder: Path) -> None:
    """Records the current digests of ``folder``'s files in its info.json."""
    info = folder / files.INFO
    raw = json.loads(info.read_text())
    if "digests" in raw:
        raw["digests"] = files.digest_files(folder, files.version_files(folder))
    info.write_text(json.dumps(raw))


def _as_version(folder: Path, version: int) -> None:
    """Makes ``folder`` look saved by an earlier release (version 1 had no digests)."""
    info = folder / files.INFO
    raw = json.loads(info.read_text())
    if version == 1:
        raw.pop("digests", None)
    raw["version"] = version
    info.write_text(json.dumps(raw))


def _load_model(path: Path):
    model, opt = _model(1)
    return checkpoint.load(path, state={"model": model, "optimizer.0": opt})


def test_metadata_payload_runs_no_code(tmp_path: Path) -> None:
    folder = _save(tmp_path / "ckpt")
    marker = tmp_path / "marker"
    (folder / "model" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    _resign(folder)
    with pytest.raises(CheckpointError, match=r"model/\.metadata"):
        _load_model(tmp_path / "ckpt")
    assert not marker.exists()


def test_optimizer_value_payload_runs_no_code(tmp_path: Path) -> None:
    """DCP stores non-tensor values (optimizer hyper-parameters) as pickles inside the
    ``.distcp`` file; its planner reads them with ``weights_only=False``."""
    folder = _save(tmp_path / "ckpt")
    marker = tmp_path / "marker"
    meta_file, data_file = folder / "model" / ".metadata", folder / "model" / "__0_0.distcp"
    metadata = pickle.loads(meta_file.read_bytes())  # our own file: trusted here
    payload = io.BytesIO()
    torch.save(Payload(marker), payload)
    offset = data_file.stat().st_size
    with open(data_file, "ab") as handle:
        handle.write(payload.getvalue())
    for index, where in metadata.storage_data.items():
        if index.fqn == "optimizer.0.param_groups.0.lr":
            where.offset, where.length = offset, len(payload.getvalue())
    meta_file.write_bytes(pickle.dumps(metadata))
    _resign(folder)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp"):
        _load_model(tmp_path / "ckpt")
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["rank state", "embedding shard"])
def test_other_pickled_files_run_no_code(tmp_path: Path, kind: str) -> None:
    folder = _save(tmp_path / "ckpt", name=f"trust_{kind.replace(' ', '_')}")
    marker = tmp_path / "marker"
    file = (folder / files.rank_file(0) if kind == "rank state"
            else folder / files.SHARDS / "0_0_r0.pt")
    torch.save({"rows": Payload(marker)}, file)
    _resign(folder)
    emb = DistEmbedding(20, 3, name=f"trust_{kind.replace(' ', '_')}")
    with pytest.raises(CheckpointError, match=file.name):
        model, opt = _model(1)
        checkpoint.load(tmp_path / "ckpt", state={"model": model, "optimizer.0": opt,
                                                  f"embeddings.{emb.name}": emb,
                                                  "sparse_optimizers.0":
                                                      SparseAdam([emb], lr=0.1)})
    assert not marker.exists()


def test_latest_that_is_a_folder_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _save(root)
    (root / files.LATEST).unlink()
    (root / files.LATEST).mkdir()
    with pytest.raises(CheckpointError, match="LATEST"):
        _load_model(root)
    model, opt = _model(0)
    with pytest.raises(CheckpointError, match="LATEST"):
        checkpoint.save(root, step=2, state={"model": model, "optimizer.0": opt})


@pytest.mark.timeout(30)
def test_latest_that_is_a_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    _save(root)
    (root / files.LATEST).unlink()
    os.mkfifo(root / files.LATEST)
    with pytest.raises(CheckpointError, match="LATEST"):
        _load_model(root)


def test_checkpoint_path_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "ckpt").write_text("not a folder")
    with pytest.raises(CheckpointError, match="not a folder"):
        _load_model(tmp_path / "ckpt")


@pytest.mark.parametrize("resign", [False, True], ids=["digests", "digests re-recorded"])
def test_truncated_distcp_is_named(tmp_path: Path, resign: bool) -> None:
    folder = _save(tmp_path / "ckpt")
    data_file = folder / "model" / "__0_0.distcp"
    data_file.write_bytes(data_file.read_bytes()[:100])
    if resign:  # the DCP folder's own checks must catch it
        _resign(folder)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp"):
        _load_model(tmp_path / "ckpt")


@pytest.mark.parametrize("damage", ["no metadata", "garbage metadata", "no model folder"])
def test_damaged_model_folder_is_a_checkpoint_error(tmp_path: Path, damage: str) -> None:
    folder = _save(tmp_path / "ckpt")
    meta_file = folder / "model" / ".metadata"
    if damage == "no metadata":
        meta_file.unlink()
    elif damage == "garbage metadata":
        meta_file.write_bytes(b"\x80\x04garbage")
    else:
        shutil.rmtree(folder / "model")
    _resign(folder)  # digests of what is there now: the folder's own checks must catch it
    with pytest.raises(CheckpointError, match="model"):
        _load_model(tmp_path / "ckpt")


# the table is entry 0 ("embeddings.<name>"), SparseAdam's step, m and v are entry 1
FILES = ["model/.metadata", "model/__0_0.distcp", "rank_0.pt", "shards/0_0_r0.pt",
         "shards/1_0_r0.pt", "shards/1_1_r0.pt", "shards/1_2_r0.pt"]


def test_every_file_of_a_version_is_covered(tmp_path: Path) -> None:
    folder = _save(tmp_path / "ckpt")
    found = files.version_files(folder)
    digests: Dict[str, str] = json.loads((folder / files.INFO).read_text())["digests"]
    assert sorted(digests) == found
    assert all(any(Path(f).match(p) for p in FILES) for f in found), found
    assert all(any(Path(f).match(p) for f in found) for p in FILES), found


@pytest.mark.parametrize("pattern", FILES)
def test_a_byte_flipped_in_place_is_detected(tmp_path: Path, pattern: str) -> None:
    folder = _save(tmp_path / "ckpt", name=f"flip_{len(pattern)}")
    file = sorted(folder.glob(pattern))[0]
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit
    file.write_bytes(bytes(data))
    model, opt = _model(1)
    emb = DistEmbedding(20, 3, name=f"flip_{len(pattern)}")
    with pytest.raises(CheckpointError, match=str(file)):
        checkpoint.load(tmp_path / "ckpt", state={"model": model, "optimizer.0": opt,
                                                  f"embeddings.{emb.name}": emb,
                                                  "sparse_optimizers.0":
                                                      SparseAdam([emb], lr=0.1)})


@pytest.mark.parametrize("version", [1, 2])
def test_an_earlier_version_is_refused_naming_it(tmp_path: Path, version: int) -> None:
    """Versions 1 and 2 had fixed slots and a nested embedding checkpoint: refused with
    the version named, never misread."""
    folder = _save(tmp_path / "ckpt")
    _as_version(folder, version)
    with pytest.raises(CheckpointError, match=f"{files.INFO}: pyg_dist.checkpoint version "
                                              f"{version} .*reads version 3"):
        _load_model(tmp_path / "ckpt")


def test_metadata_pointing_outside_the_folder_is_refused(tmp_path: Path) -> None:
    folder = _save(tmp_path / "ckpt")
    canary = tmp_path / "canary.distcp"
    canary.write_bytes((folder / "model" / "__0_0.distcp").read_bytes())
    meta_file = folder / "model" / ".metadata"
    metadata = pickle.loads(meta_file.read_bytes())  # our own file: trusted here
    for where in metadata.storage_data.values():
        where.relative_path = "../../../canary.distcp"
    meta_file.write_bytes(pickle.dumps(metadata))
    _resign(folder)
    with pytest.raises(CheckpointError, match=r"model/\.metadata.*not to a byte range"):
        _load_model(tmp_path / "ckpt")
