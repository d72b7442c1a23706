"""The public surface of ``pyg_dist`` is visible: every module is either public or internal.

- **Public**: no part of its dotted name starts with ``_``. It declares ``__all__``, and
  every name listed there has a docstring: a module, class or function its own
  ``__doc__`` (a dataclass's generated signature does not count), a constant a ``#:``
  comment above (or after) its assignment or a string right below it. No public module imports
  the repository's ``tests``.
- **Internal**: a ``_``-prefixed module, or any module inside a ``_``-prefixed
  subpackage. Users import from the packages; internal modules may change at any time.

``pyg_dist/__init__.py`` plus each public package's ``__all__`` is the API reference.
"""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Dict, List, Optional

from test_imports import MODULES  # dotted name -> file of every module of pyg_dist


def modules() -> Dict[str, Path]:
    """Dotted name -> file of every module of the package (packages by ``__init__``)."""
    return MODULES


def is_internal(name: str) -> bool:
    """Whether module ``name`` is internal (some part of its name starts with ``_``)."""
    return any(part.startswith("_") and part != "__init__" for part in name.split("."))


def declared_all(tree: ast.Module) -> Optional[List[str]]:
    """The names of a module's top-level ``__all__`` (``None`` without one)."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return list(ast.literal_eval(node.value))
    return None


def constant_documented(module: str, name: str, seen: int = 0) -> bool:
    """Whether constant ``name`` of ``module`` has a ``#:`` comment above its assignment
    or a string below it, following ``from X import name`` to where it is defined."""
    path = modules().get(module)
    if path is None or seen > 5:
        return False
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                inline = "#:" in lines[node.end_lineno - 1]
                below = tree.body[i + 1] if i + 1 < len(tree.body) else None
                return above.startswith("#:") or inline or (
                    isinstance(below, ast.Expr) and isinstance(below.value, ast.Constant)
                    and isinstance(below.value.value, str))
        if isinstance(node, ast.ImportFrom) and node.module and \
                any((a.asname or a.name) == name for a in node.names):
            return constant_documented(node.module, name, seen + 1)
    return False


def own_doc(obj: object) -> str:
    """The docstring ``obj`` itself carries (not a dataclass's generated signature)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not doc:
        return ""
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):  # dataclass default
        return ""
    return doc.strip()


def surface_problems(name: str, path: Path) -> List[str]:
    """What keeps module ``name`` (at ``path``) from being public-with-``__all__`` or
    internal, and undocumented or test-importing names of a public one."""
    if is_internal(name):
        return []
    tree = ast.parse(path.read_text(), str(path))
    problems = []
    for node in ast.walk(tree):
        targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        problems += [f"{name}:{node.lineno} imports {t}" for t in targets
                     if t == "tests" or t.startswith("tests.")]
    names = declared_all(tree)
    if names is None:
        return problems + [f"{name}: public (no leading underscore) but has no __all__"]
    module = importlib.import_module(name) if names else None
    for attr in names:
        if hasattr(module, attr):
            obj = getattr(module, attr)
        else:  # a submodule listed by its package
            obj = importlib.import_module(f"{name}.{attr}")
        if inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj):
            documented = bool(own_doc(obj))
        else:
            documented = constant_documented(name, attr)
        if not documented:
            problems.append(f"{name}.{attr}: listed in __all__ without a docstring")
    return problems


def test_every_module_is_public_with_all_or_internal():
    found = [p for name, path in modules().items() for p in surface_problems(name, path)]
    assert not found, f"{len(found)} surface problems:\n  " + "\n  ".join(found)


def test_the_public_modules_are_the_packages_and_entry_points():
    """The public modules are few: packages, the CLI entry points and a handful of
    documented top-level modules; everything else is internal."""
    public = sorted(name for name in modules() if not is_internal(name))
    assert "pyg_dist.loader" in public and "pyg_dist.cli.partition" in public
    assert "pyg_dist.sampler._neighbor_sampler" not in public
    assert len(public) < 40, public


def test_the_checks_can_fail(tmp_path):
    """Each rule catches what it forbids (on sample sources, not on the library)."""
    assert is_internal("pyg_dist.sampler._cache.file") and is_internal("pyg_dist._typing")
    assert not is_internal("pyg_dist.cli.partition") and not is_internal("pyg_dist")
    assert declared_all(ast.parse("x = 1")) is None
    assert declared_all(ast.parse("__all__ = ['a', 'b']")) == ["a", "b"]

    @__import__("dataclasses").dataclass
    class Undocumented:
        x: int

    class Documented:
        """Has one."""

    assert own_doc(Undocumented) == "" and own_doc(Documented) == "Has one."
    sample = tmp_path / "sample.py"
    sample.write_text("from tests.support import scripts\n__all__ = []\n")
    assert surface_problems("sample", sample) == ["sample:1 imports tests.support"]
    sample.write_text("import os\n")
    assert surface_problems("sample", sample) == \
        ["sample: public (no leading underscore) but has no __all__"]


def test_names_and_subpackages_resolve_on_first_use():
    """``pyg_dist`` imports its packages when a name is first used (PEP 562): every name
    of ``__all__`` and every subpackage resolves; anything else is an AttributeError."""
    import pyg_dist

    assert all(getattr(pyg_dist, name) is not None for name in pyg_dist.__all__)
    # called directly: here the package holds its subpackages already (they were imported)
    assert pyg_dist.__getattr__("checkpoint") is importlib.import_module("pyg_dist.checkpoint")
    assert pyg_dist.__getattr__("Partitioner") is importlib.import_module(
        "pyg_dist.partition").Partitioner
    assert set(pyg_dist.__all__) <= set(dir(pyg_dist))
    try:
        pyg_dist.__getattr__("no_such_name")
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")
