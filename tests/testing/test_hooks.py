"""The library's test hooks are documented in one module, the only one reading them."""
from __future__ import annotations

import re
from pathlib import Path

from pyg_dist import hooks

PACKAGE = Path(hooks.__file__).resolve().parent
# The distributed partitioner still reads its two variables itself; the partition rework
# switches it to hooks.kill_if_requested / hooks.partition_unshared, then this set empties.
NOT_YET_MOVED: set = set()


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_every_hook_variable_is_documented_in_the_hooks_module():
    names = set()
    for _, text in _sources():
        names |= set(re.findall(r"PYG_DIST_TEST_[A-Z_]+", text))
    assert names, "no hook found at all: the scan is broken"
    assert names <= set(hooks.HOOKS), names - set(hooks.HOOKS)
    for name in hooks.HOOKS:
        assert name in hooks.__doc__, f"{name} is missing from the module's table"


def test_only_the_hooks_module_reads_the_variables():
    readers = {rel for rel, text in _sources()
               if rel != "hooks.py" and re.search(r"environ[^\n]*PYG_DIST_TEST_", text)}
    assert readers <= NOT_YET_MOVED, readers - NOT_YET_MOVED


def test_hooks_do_nothing_without_their_variables(monkeypatch):
    monkeypatch.delenv(hooks.PARTITION_KILL, raising=False)
    monkeypatch.delenv(hooks.PARTITION_UNSHARED, raising=False)
    hooks.kill_if_requested("order_edges", 0)  # still alive
    assert not hooks.partition_unshared()
    monkeypatch.setenv(hooks.PARTITION_KILL, "order_edges:1")
    hooks.kill_if_requested("order_edges", 0)  # another rank's phase: still alive
    hooks.kill_if_requested("assign", 1)
    monkeypatch.setenv(hooks.PARTITION_UNSHARED, "1")
    assert hooks.partition_unshared()
