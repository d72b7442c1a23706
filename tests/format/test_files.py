"""The one file-system helper (:mod:`pyg_dist.format._files`): atomic files and folders
(a failure leaves the old content), versioned folders and their ``LATEST`` pointer."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyg_dist.format import _files as files


class Crash(BaseException):
    """Stands in for the process dying."""


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    files.write_text(target, "old\n")

    def half(f) -> None:  # type: ignore[no-untyped-def]
        f.write("new, half")
        raise Crash()
    with pytest.raises(Crash):
        files.atomic_write(target, half, binary=False)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no temporary left
    files.write_json(target, {"x": [1, 2]})
    assert target.read_text() == '{\n "x": [\n  1,\n  2\n ]\n}\n'


def test_atomic_dir_keeps_the_old_folder_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with files.atomic_dir(out) as tmp:
        (tmp / "f").write_text("1")
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        with files.atomic_dir(out):
            pass
    with pytest.raises(RuntimeError):
        with files.atomic_dir(out, overwrite=True) as tmp:
            (tmp / "f").write_text("2")
            raise RuntimeError("writer failed")
    assert (out / "f").read_text() == "1"
    with files.atomic_dir(out, overwrite=True) as tmp:
        (tmp / "g").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == ["g"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_latest_names_a_complete_version(tmp_path: Path) -> None:
    assert files.read_latest(tmp_path / "absent") is None
    assert files.read_latest(tmp_path) is None
    names = [files.new_version(tmp_path, step) for step in (1, 2, 3)]
    files.write_latest(tmp_path, names[2])
    assert files.read_latest(tmp_path) == names[2]
    assert [p.name for p in files.versions(tmp_path)] == names
    files.prune(tmp_path, names[2], keep=2, complete=lambda p: p.name != names[0])
    assert [p.name for p in files.versions(tmp_path)] == names[1:]
    with pytest.raises(ValueError, match="not a version folder"):
        files.write_latest(tmp_path, "../elsewhere")


@pytest.mark.parametrize("damage", ["outside", "missing version", "folder", "fifo",
                                    "incomplete"])
def test_a_bad_latest_is_named(tmp_path: Path, damage: str) -> None:
    name = files.new_version(tmp_path, 5)
    pointer = tmp_path / files.LATEST
    complete = (lambda p: False) if damage == "incomplete" else Path.is_dir
    if damage == "outside":
        pointer.write_text("../elsewhere\n")
    elif damage == "missing version":
        pointer.write_text("step000000009-deadbeef\n")
    elif damage == "folder":
        pointer.mkdir()
    elif damage == "fifo":
        os.mkfifo(pointer)
    else:
        files.write_latest(tmp_path, name)
    with pytest.raises(files.PointerError, match=str(pointer)):
        files.read_latest(tmp_path, complete)


@pytest.mark.parametrize("overwrite", ["yes", 1, None])
def test_overwrite_must_be_a_bool(tmp_path, overwrite):
    """A truthy non-bool replaced an existing folder (a partition folder with
    Partitioner(..., overwrite="yes")): every atomic folder refuses it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("data")
    with pytest.raises(TypeError, match=r"overwrite must be True or False, got str 'yes'"
                       if overwrite == "yes" else r"overwrite must be True or False"):
        with files.atomic_dir(out, overwrite=overwrite):
            pass
    assert (out / "keep").read_text() == "data"
