"""The versions of a checkpoint folder, in one process: pruning never removes what
``LATEST`` names (also after a concurrent switch) and never leaves a version half deleted
under its name; a failure after ``LATEST`` switched keeps the new version current; a
``LATEST`` naming a missing version lists the complete ones and how to resume;
``load(version=...)``; and the ``pyg-dist-checkpoint`` command."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyg_dist import checkpoint
from pyg_dist.checkpoint import CheckpointError, _versions as versions
from pyg_dist.cli import checkpoint as cli
from pyg_dist.format import _files as fs


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def _saved(root: Path, steps=(1, 2, 3), keep: int = 5):
    names = []
    for step in steps:
        names.append(checkpoint.save(root, step, {"model": _model(step)}, keep=keep))
    return names


def test_prune_keeps_what_latest_names_after_a_concurrent_switch(tmp_path):
    names = _saved(tmp_path)
    fs.write_latest(tmp_path, names[0])  # e.g. pyg-dist-checkpoint use, meanwhile
    versions.prune_versions(tmp_path, names[2], 1, names[1])
    assert sorted(p.name for p in fs.versions(tmp_path)) == sorted([names[0], names[2]])
    assert versions.current(tmp_path) == names[0]


def test_a_switch_between_moving_aside_and_deleting_keeps_the_version(tmp_path, monkeypatch):
    names = _saved(tmp_path, keep=3)
    said = iter([names[2], names[0]])  # LATEST read before the move, then after it
    monkeypatch.setattr(fs, "pointer_name", lambda root: next(said))
    assert not fs.remove_version(tmp_path, names[0])
    assert versions.complete(tmp_path / names[0])
    assert not list(tmp_path.glob(".*"))


def test_a_removal_that_fails_midway_leaves_no_half_version(tmp_path, monkeypatch):
    names = _saved(tmp_path, keep=3)

    def fail_midway(path, *args, **kwargs):
        next(Path(path).rglob("*.distcp")).unlink()
        raise OSError("disk went away")
    monkeypatch.setattr(shutil, "rmtree", fail_midway)
    with pytest.warns(UserWarning, match="disk went away"):
        assert fs.remove_version(tmp_path, names[0])
    assert not (tmp_path / names[0]).exists()  # never visible half deleted
    assert [p.name.startswith(f".{names[0]}.") for p in tmp_path.glob(".*")] == [True]
    monkeypatch.undo()
    _saved(tmp_path, steps=(4,), keep=2)  # the next save removes the leftover
    assert not list(tmp_path.glob(".*"))


def test_prune_keeps_the_previous_version_first_and_removes_leftovers(tmp_path):
    names = _saved(tmp_path, keep=5)
    fs.new_version(tmp_path, 9)  # a killed save's incomplete version
    (tmp_path / names[2] / "info.json").unlink()  # ... and one killed before its info
    fs.write_latest(tmp_path, names[0])
    name = checkpoint.save(tmp_path, 10, {"model": _model(10)}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fs.LATEST, names[0], name])


def test_failure_after_latest_switched_keeps_the_new_version(tmp_path, monkeypatch):
    _saved(tmp_path, steps=(1,))

    def prune_fails(*args, **kwargs):
        raise OSError("cannot list")
    monkeypatch.setattr(versions, "prune_versions", prune_fails)
    with pytest.raises(CheckpointError, match="published and current.*cannot list"):
        checkpoint.save(tmp_path, 2, {"model": _model(2)})
    model = _model(0)
    assert checkpoint.load(tmp_path, {"model": model}).step == 2
    assert torch.equal(model.weight, _model(2).weight)


def test_failure_before_latest_switched_keeps_the_previous(tmp_path, monkeypatch):
    names = _saved(tmp_path, steps=(1,))

    def switch_fails(*args, **kwargs):
        raise OSError("read-only")
    monkeypatch.setattr(versions, "switch_latest", switch_fails)
    with pytest.raises(OSError, match="read-only"):
        checkpoint.save(tmp_path, 2, {"model": _model(2)})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fs.LATEST, names[0]])
    assert checkpoint.load(tmp_path, {"model": _model(0)}).step == 1


def test_latest_naming_a_removed_version_says_how_to_resume(tmp_path):
    names = _saved(tmp_path)
    shutil.rmtree(tmp_path / names[2])
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(tmp_path, {"model": _model(0)})
    message = str(err.value)
    assert f"names '{names[2]}', which is not a complete version" in message
    assert f"{names[1]} (step 2), {names[0]} (step 1)" in message
    assert f"checkpoint.load('{tmp_path}', state, version='{names[1]}')" in message
    assert f"pyg-dist-checkpoint use {tmp_path} {names[1]}" in message
    model = _model(0)
    info = checkpoint.load(tmp_path, {"model": model}, version=names[0])
    assert info.step == 1 and torch.equal(model.weight, _model(1).weight)
    with pytest.raises(CheckpointError, match=f"'{names[2]}' is not a complete version"):
        checkpoint.load(tmp_path, {"model": model}, version=names[2])
    with pytest.raises(ValueError, match="not a version name"):
        checkpoint.load(tmp_path, {"model": model}, version="../x")


def test_no_complete_version_left_says_so(tmp_path):
    names = _saved(tmp_path, steps=(1,))
    (tmp_path / names[0] / "info.json").unlink()
    with pytest.raises(CheckpointError, match="no complete version is left"):
        checkpoint.load(tmp_path, {"model": _model(0)})


def test_the_command_lists_verifies_and_repoints(tmp_path, capsys):
    names = _saved(tmp_path)
    shutil.rmtree(tmp_path / names[2])
    assert cli.main(["list", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{names[1]}  step 2" in out and f"LATEST names '{names[2]}', which is not in" in out
    flipped = next((tmp_path / names[1]).rglob("*.distcp"))
    flipped.write_bytes(flipped.read_bytes()[:-1] + b"x")
    assert cli.main(["use", str(tmp_path), names[1]]) == 1
    assert str(flipped) in capsys.readouterr().out
    assert fs.pointer_name(tmp_path) == names[2]  # unchanged
    assert cli.main(["use", str(tmp_path), names[0]]) == 0
    assert versions.current(tmp_path) == names[0]
    assert cli.main(["verify", str(tmp_path)]) == 0
    assert checkpoint.load(tmp_path, {"model": _model(0)}).step == 1


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_the_command_runs_as_a_module(tmp_path):
    """... without importing torch_geometric (seconds of CPU per start: torch._dynamo,
    pandas), which reading a checkpoint does not need; ``-X importtime`` lists every
    module the command imported."""
    names = _saved(tmp_path, steps=(1,))
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parents[2])}
    run = [sys.executable, "-X", "importtime", "-m", "pyg_dist.cli.checkpoint"]
    out = subprocess.run([*run, "verify", str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=240)
    assert out.returncode == 0 and f"{names[0]}: OK (step 1" in out.stdout, out
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "pyg_dist.checkpoint" in imported, out.stderr[-2000:]
    assert not {"torch_geometric", "pyg_dist.loader"} & imported, sorted(imported)


@pytest.mark.parametrize("argv, message", [
    (["use", "DIR", "nope"], "'nope' is not a version name"),
    (["use", "DIR", "step000000007-0123abcd"], "no version step000000007-0123abcd"),
    (["verify", "DIR/missing"], "not a folder"),
    (["frobnicate", "DIR"], "invalid choice"),
    (["use", "DIR"], "required"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, message):
    _saved(tmp_path, steps=(1,))
    code = cli.main([a.replace("DIR", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_verify_without_latest_names_the_problem(tmp_path, capsys):
    names = _saved(tmp_path, steps=(1, 2))
    (tmp_path / fs.LATEST).unlink()
    assert cli.main(["verify", str(tmp_path)]) == 2
    assert "no LATEST" in capsys.readouterr().err
    assert cli.main(["verify", str(tmp_path), names[0]]) == 0
    assert cli.main(["list", str(tmp_path)]) == 0
    assert "a job starts from scratch" in capsys.readouterr().out
