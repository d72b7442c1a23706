"""Swapping a complete folder in over an existing one: one atomic exchange where the
system can (the old folder is never missing from its place), two renames elsewhere."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyg_dist.format import _files as files, _renames as renames


def _folder(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "f").write_text(text)
    return path


def test_exchange_swaps_two_folders(tmp_path):
    if renames._LIBC is None:
        pytest.skip("no renameat2 here")
    a, b = _folder(tmp_path / "a", "A"), _folder(tmp_path / "b", "B")
    assert renames.exchange(a, b)
    assert (a / "f").read_text() == "B" and (b / "f").read_text() == "A"


def test_out_is_never_missing_while_it_is_replaced(tmp_path, monkeypatch):
    """Every rename while ``out`` is replaced leaves a complete folder at ``out``."""
    out = _folder(tmp_path / "out", "old")
    seen = []
    real = os.replace

    def watch(src, dst):
        real(src, dst)
        seen.append(out.is_dir() and (out / "f").read_text())
    monkeypatch.setattr(os, "replace", watch)
    with files.atomic_dir(out, overwrite=True) as tmp:
        (tmp / "f").write_text("new")
    assert (out / "f").read_text() == "new"
    assert all(seen), seen  # out was there, complete, after every rename
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_without_exchange_the_old_folder_is_moved_aside_and_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(renames, "_LIBC", None)
    out = _folder(tmp_path / "out", "old")
    with files.atomic_dir(out, overwrite=True) as tmp:
        (tmp / "f").write_text("new")
    assert (out / "f").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
