"""Every JSON file pyg_dist reads, whatever it holds, gives one line naming the file in
its format's exception class: nested a hundred thousand deep (no bare RecursionError),
a pickle instead of text (no UnicodeDecodeError), text that is not JSON."""
from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Callable, Tuple

import numpy as np
import pytest
import torch

from pyg_dist import LocalGraphStore, Partitioner, checkpoint
from pyg_dist.checkpoint import CheckpointError
from pyg_dist.checkpoint._files import INFO, Info
from pyg_dist.chunked import ChunkedFormatError
from pyg_dist.chunked import ChunkedMeta
from pyg_dist.convert import PygFormatError
from pyg_dist.convert._pyg_layout import PygLayout
from pyg_dist.format import PartitionFormatError
from pyg_dist.format._part_manifest import MANIFEST_FILE
from pyg_dist.inference import ExportFormatError, read_export
from pyg_dist.testing import encode_ids

DEEP = "[" * 100_000 + "]" * 100_000
PICKLE = pickle.dumps({"format": "pyg_dist", "version": 2})


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pyg_dist.datasets import community_graph

    root = tmp_path_factory.mktemp("json_parts")
    Partitioner(encode_ids(community_graph(40, 3.0, 4, 2, seed=0)), 1, root,
                progress=False).generate()
    return root


def _meta(root: Path, tmp: Path) -> Tuple[Path, Callable[[], object], type]:
    return root / "META.json", lambda: LocalGraphStore.from_partition(root, 0), \
        PartitionFormatError


def _manifest(root: Path, tmp: Path):
    return root / "part_0" / MANIFEST_FILE, \
        lambda: LocalGraphStore.from_partition(root, 0, verify=True), PartitionFormatError


def _metadata(root: Path, tmp: Path):
    folder = tmp / "chunked"
    folder.mkdir()
    return folder / "metadata.json", lambda: ChunkedMeta.read(folder), ChunkedFormatError


def _info(root: Path, tmp: Path):
    model = torch.nn.Linear(3, 2)
    version = checkpoint.save(tmp / "ckpt", step=1, state={"model": model})
    return tmp / "ckpt" / version / INFO, lambda: Info.read(tmp / "ckpt" / version / INFO), \
        CheckpointError


def _export(root: Path, tmp: Path):
    out = tmp / "exp"
    out.mkdir()
    np.save(out / "a.npy", np.arange(3, dtype=np.int64))
    return out / "manifest.json", lambda: read_export(out), ExportFormatError


def _pyg_meta(root: Path, tmp: Path):
    folder = tmp / "pyg"
    folder.mkdir()
    return folder / "META.json", lambda: PygLayout.read(folder, None), PygFormatError


READERS = {"META.json": _meta, "MANIFEST.json": _manifest, "metadata.json": _metadata,
           "info.json": _info, "manifest.json": _export, "pyg META.json": _pyg_meta}


@pytest.mark.parametrize("content", [DEEP.encode(), PICKLE, b"{not json"],
                         ids=["nested", "pickled", "not-json"])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_bad_json_is_one_line_naming_the_file(parts, tmp_path, reader, content):
    root = tmp_path / "parts"
    import shutil
    shutil.copytree(parts, root)
    path, read, error = READERS[reader](root, tmp_path)
    path.write_bytes(content)
    with pytest.raises(error) as info:
        read()
    text = str(info.value)
    assert str(path) in text and "\n" not in text, text
    assert not isinstance(info.value.__cause__ or info.value.__context__,
                          (RecursionError, UnicodeDecodeError)) or info.value.__suppress_context__


@pytest.mark.parametrize("content", [DEEP.encode(), PICKLE], ids=["nested", "pickled"])
def test_a_malformed_writer_record_is_no_writer(tmp_path, content):
    from pyg_dist.format._leftovers import Writer

    path = tmp_path / ".out.owner"
    path.write_bytes(content)
    assert Writer.from_file(path) is None


def test_every_json_reader_uses_the_shared_helper():
    """No module parses JSON files on its own (the shared helper names the file on
    every failure): ``json.load``/``json.loads`` appear only in the helper."""
    import pyg_dist

    package = Path(pyg_dist.__file__).parent
    users = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if "json.load" in p.read_text() and p.name != "_jsonio.py")
    # _cache/shared.py parses a value from the job's own rendezvous store, not a file
    assert users == ["sampler/_cache/shared.py"], users
