"""A killed partition run's hidden temp folder is removed by the next run, when provably dead."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from pyg_dist import Partitioner
from pyg_dist.datasets import community_graph
from pyg_dist.format import _files as files, _partition_io as io


@pytest.fixture(scope="module")
def graph():
    return community_graph(200, avg_degree=4, feat_dim=2, num_classes=2, seed=1)


def _hidden(parent: Path) -> list:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def _killed_writer(out: Path) -> None:
    """Forks a process that starts writing ``out`` and dies without cleaning up."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            writing = files.atomic_dir(out)  # held: a collected generator would clean up
            tmp = writing.__enter__()
            (tmp / "big.bin").write_bytes(b"\0" * 65536)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.multiprocess
def test_next_run_removes_a_killed_runs_temp_folder(graph, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _killed_writer(out)
    assert any(name.endswith(".tmp") for name in _hidden(tmp_path)), _hidden(tmp_path)
    Partitioner(graph, 2, out, progress=False).generate()
    assert _hidden(tmp_path) == [] and sorted(os.listdir(tmp_path)) == ["out"]
    _killed_writer(out)  # also beside an existing output, with overwrite
    Partitioner(graph, 2, out, progress=False, overwrite=True).generate()
    assert _hidden(tmp_path) == []


def test_live_and_unknown_writers_are_left_alone(graph, tmp_path: Path) -> None:
    from pyg_dist.format import _leftovers as leftovers

    out = tmp_path / "out"
    live = files.atomic_dir(out)
    live_tmp = live.__enter__()  # this process, still writing
    other = leftovers.Writer(host=f"not-{socket.gethostname()}", boot_id="", pid=1, start=0)
    other_tmp = leftovers.claim(out, other)  # a writer on another host
    unknown = tmp_path / ".out.abcd1234.tmp"  # no owner file (e.g. an older pyg_dist)
    unknown.mkdir()
    with pytest.warns(UserWarning) as record:
        Partitioner(graph, 2, out, progress=False).generate()
    text = "\n".join(str(w.message) for w in record)
    assert str(live_tmp) in text and str(other_tmp) in text and str(unknown) in text
    assert live_tmp.is_dir() and other_tmp.is_dir() and unknown.is_dir()
    assert live.__exit__(RuntimeError, RuntimeError("stop"), None) is False  # not swallowed
    assert not live_tmp.exists()


def test_dead_writer_detection_and_old_folder_restore(tmp_path: Path) -> None:
    from pyg_dist.format import _leftovers as leftovers

    me = leftovers.Writer.current()
    assert me.pid == os.getpid() and not me.is_gone()
    assert leftovers.Writer(me.host, me.boot_id, me.pid, -1).is_gone()  # pid reused
    assert leftovers.Writer(me.host, "another-boot", me.pid, me.start).is_gone()
    assert not leftovers.Writer("elsewhere", me.boot_id, me.pid, -1).is_gone()
    assert not leftovers.Writer(me.host, me.boot_id, me.pid, -1, "pid:[1]").is_gone()
    # a run killed between moving the old output aside and moving the new one in
    out = tmp_path / "out"
    dead = leftovers.Writer(me.host, me.boot_id, me.pid, -1)
    tmp = leftovers.claim(out, dead)
    old = tmp.with_suffix(".old")
    old.mkdir()
    (old / "META.json").write_text("previous")
    with pytest.warns(UserWarning, match="restored"):
        assert leftovers.clean_stale(out) == [tmp, old]
    assert not tmp.exists() and not old.exists()
    assert (out / "META.json").read_text() == "previous" and _hidden(tmp_path) == []
