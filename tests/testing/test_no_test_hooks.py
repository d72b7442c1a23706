"""The library reads no test-only variable: faults are injected from the tests (e.g.
``tests/support/kill_at_phase.py`` patches a phase's function, then runs the real entry
point), never through hooks compiled into the library."""
from __future__ import annotations

import re
from pathlib import Path

import pyg_dist

PACKAGE = Path(pyg_dist.__file__).resolve().parent


def test_no_library_module_names_a_test_variable():
    found = {path.relative_to(PACKAGE).as_posix()
             for path in sorted(PACKAGE.rglob("*.py"))
             if re.search(r"PYG_DIST_TEST_", path.read_text())}
    assert not found, f"library modules naming PYG_DIST_TEST_* variables: {sorted(found)}"
