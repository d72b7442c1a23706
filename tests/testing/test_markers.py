"""The ``multiprocess`` marker rule: every test that starts a process carries it.

``pytest -m "not multiprocess"`` is the quick inner loop; it stays one-process because
this file reads the whole test tree (:mod:`tests.support.spawn_scan`) and the
conftest's run-time guard (:mod:`tests.support.spawn_guard`) fails any unmarked test
that starts a process anyway (e.g. through a loader's sampler workers).
"""
from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import pytest

from tests.support.spawn_guard import SpawnGuard
from tests.support.spawn_scan import Scanner, parse_module, unmarked_spawning_tests

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_that_starts_processes_is_marked() -> None:
    problems = unmarked_spawning_tests(TESTS)
    assert not problems, "\n".join(problems)


def _scan(tmp_path: Path, files: Dict[str, str]) -> list:
    root = tmp_path / "tests"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return Scanner(root).unmarked()


def test_scanner_flags_direct_and_indirect_starts(tmp_path: Path) -> None:
    problems = _scan(tmp_path, {
        "helpers.py": """
            import subprocess
            def launch(cmd):
                return subprocess.Popen(cmd)
            class Job:
                def __init__(self):
                    self.proc = launch(["true"])
        """,
        "conftest.py": """
            import pytest
            import multiprocessing as mp
            @pytest.fixture
            def worker():
                return mp.get_context("spawn").Process(target=print)
        """,
        "sub/test_a.py": """
            import os, subprocess, pytest
            from helpers import Job, launch
            from pyg_dist.testing import run_ranks
            def _local():
                return os.fork()
            def test_direct():
                subprocess.run(["true"])
            def test_helper_in_file():
                _local()
            def test_helper_module():
                launch(["true"])
            def test_helper_class():
                Job()
            def test_conftest_fixture(worker):
                pass
            def test_launcher():
                run_ranks(print, 2)
            def test_pure():
                assert 1 + 1 == 2
        """,
    })
    flagged = sorted(p.split("::")[1].split(":")[0] for p in problems)
    assert flagged == ["test_conftest_fixture", "test_direct", "test_helper_class",
                       "test_helper_in_file", "test_helper_module", "test_launcher"]
    assert any("launch -> subprocess.Popen" in p for p in problems), problems


def test_scanner_accepts_every_way_of_marking(tmp_path: Path) -> None:
    problems = _scan(tmp_path, {
        "test_module.py": """
            import subprocess, pytest
            pytestmark = [pytest.mark.timeout(9), pytest.mark.multiprocess]
            def test_a():
                subprocess.run(["true"])
        """,
        "test_each.py": """
            import subprocess, pytest
            @pytest.mark.multiprocess
            def test_a():
                subprocess.run(["true"])
            @pytest.mark.parametrize("n", [0, pytest.param(1, marks=pytest.mark.multiprocess)])
            def test_b(n):
                subprocess.run(["true"]) if n else None
            @pytest.mark.multiprocess
            class TestC:
                def test_c(self):
                    subprocess.run(["true"])
        """,
    })
    assert problems == []


def test_scanner_names_the_file_and_test(tmp_path: Path) -> None:
    (problem,) = _scan(tmp_path, {"test_x.py": "import subprocess\n"
                                               "def test_y():\n    subprocess.call(['true'])\n"})
    assert problem.startswith("tests/test_x.py::test_y:") and "subprocess.call" in problem
    assert parse_module(tmp_path / "tests" / "test_x.py").module_marked is False


@pytest.mark.multiprocess
def test_guard_sees_subprocess_and_multiprocessing_starts() -> None:
    guard = SpawnGuard.active()
    assert guard is not None, "tests/conftest.py installs the guard"
    assert guard.current == [], "a marked test still records (nothing started yet)"
    subprocess.run(["uname"], capture_output=True, check=True)
    assert guard.current == [], "a shared-library probe (ctypes.util) is no process start"
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    proc = multiprocessing.get_context("spawn").Process(target=print, name="probe")
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    seen = " ".join(guard.current or ())
    assert "subprocess.Popen" in seen and sys.executable in seen, seen
    assert "multiprocessing.Process.start (probe)" in seen, seen
