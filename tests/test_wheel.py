"""The installed package is the library: no module of ``pyg_dist`` is test machinery.

Test machinery, concretely: a module that imports a test framework (``pytest``,
``_pytest``, ``hypothesis``, ``unittest.mock``) or the repository's ``tests`` package,
installs an audit hook, or names a test-only environment variable (``PYG_DIST_TEST_*``).
Such code lives in ``tests/support/``, which the wheel does not carry. What users' own
tests need is the small public :mod:`pyg_dist.testing`.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pyg_dist

REPO = Path(__file__).resolve().parents[1]
TEST_FRAMEWORKS = ("pytest", "_pytest", "hypothesis", "unittest.mock", "tests")
TEST_VARIABLE = re.compile(r"PYG_DIST_TEST_")


def library_modules() -> List[Tuple[str, Path]]:
    """(dotted name, file) of every module of the pyg_dist package."""
    out = [("pyg_dist", Path(pyg_dist.__file__))]
    for info in pkgutil.walk_packages(pyg_dist.__path__, "pyg_dist."):
        spec = importlib.util.find_spec(info.name)
        assert spec is not None and spec.origin, info.name
        out.append((info.name, Path(spec.origin)))
    return sorted(out)


def machinery_in(name: str, source: str) -> Iterator[str]:
    """Why ``source`` (module ``name``) is test machinery; nothing if it is not."""
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            for target in targets:
                if any(target == f or target.startswith(f + ".") for f in TEST_FRAMEWORKS):
                    yield f"{name}:{node.lineno} imports {target}"
        elif isinstance(node, ast.Attribute) and node.attr == "addaudithook":
            yield f"{name}:{node.lineno} installs an audit hook"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and TEST_VARIABLE.search(node.value):
            yield f"{name}:{node.lineno} names a test-only variable ({node.value[:40]!r})"


def test_the_walk_finds_the_library():
    names = [name for name, _ in library_modules()]
    assert len(names) > 100 and "pyg_dist.loader._node_loader" in names, len(names)
    assert all(path.is_relative_to(REPO / "pyg_dist") or "site-packages" in str(path)
               for _, path in library_modules())


def test_no_library_module_is_test_machinery():
    found = [why for name, path in library_modules()
             for why in machinery_in(name, path.read_text())]
    assert not found, "test machinery in the library:\n  " + "\n  ".join(found)


def test_the_check_sees_test_machinery():
    """The rules catch each kind (they must be able to fail)."""
    samples = {"import pytest": "imports pytest",
               "from tests.support import scripts": "imports tests.support",
               "import sys\nsys.addaudithook(print)": "audit hook",
               "import os\nos.environ.get('PYG_DIST_TEST_KILL')": "test-only variable"}
    for source, why in samples.items():
        reasons = list(machinery_in("sample", source))
        assert reasons and why in reasons[0], (source, reasons)
    assert not list(machinery_in("sample", "import torch\nfrom pyg_dist import loop"))


def test_public_testing_is_small_and_documented():
    testing = importlib.import_module("pyg_dist.testing")
    modules = {name for name, _ in library_modules() if name.startswith("pyg_dist.testing.")}
    assert modules == {"pyg_dist.testing._launch", "pyg_dist.testing._graphs"}, modules
    for name in testing.__all__:
        assert getattr(testing, name).__doc__, f"pyg_dist.testing.{name} has no docstring"


def test_the_wheel_holds_only_pyg_dist():
    text = (REPO / "pyproject.toml").read_text()
    assert re.search(r'\[tool\.setuptools\.packages\.find\]\s*include = \["pyg_dist\*"\]', text)
    assert (REPO / "tests" / "support" / "__init__.py").is_file()
