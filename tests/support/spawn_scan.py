"""Finds tests that start processes without the ``multiprocess`` marker, by reading them.

A test *spawns* when its body, a fixture it asks for, or a helper it calls (in its own
file or in a helper module beside it under ``tests/``) starts a process: ``subprocess``,
``multiprocessing``/``torch.multiprocessing`` (``Process``, ``spawn``, ``get_context``,
``start_processes``, ``Pool``), ``os.fork``/``os.system``/``os.exec*``, ``run_ranks``,
``run_script``, or the emulated cluster. Such a test must carry
``@pytest.mark.multiprocess`` or sit under a ``pytestmark`` that holds it, so that
``pytest -m "not multiprocess"`` is a quick inner loop. Starts that only a library call
makes (a loader with ``num_workers > 0``) are not visible here; the run-time guard in
:mod:`tests.support.spawn_guard` catches those.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set

MARKER = "multiprocess"
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "getoutput",
                    "getstatusoutput"}
PROCESS_ATTRS = {"Process", "Pool", "spawn", "start_processes", "get_context",
                 "ProcessPoolExecutor", "spawnv_passfds"}
OS_CALLS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv",
            "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
            "spawnve", "spawnl", "spawnle"}
SPAWNING_NAMES = {"run_ranks", "run_script", "EmulatedCluster", "Popen", "ProcessPoolExecutor",
                  "start_processes"}


@dataclass
class Module:
    """What one test-tree file defines: functions, fixtures, marks and imports.

    Args:
        path: the file.
        functions: top-level function and class name (and ``Class.method``) -> its node.
        fixtures: names of functions decorated as pytest fixtures.
        imported: local name -> (module base name, name in that module).
        module_marked: whether a module-level ``pytestmark`` holds the marker.
    """

    path: Path
    functions: Dict[str, ast.AST] = field(default_factory=dict)
    fixtures: Set[str] = field(default_factory=set)
    imported: Dict[str, tuple] = field(default_factory=dict)
    module_marked: bool = False
    marked_classes: Set[str] = field(default_factory=set)
    owner_class: Dict[str, str] = field(default_factory=dict)


def _holds_marker(node: Optional[ast.AST]) -> bool:
    """Whether an expression (a mark, a list of marks, ``pytest.param(marks=...)``) names it."""
    if node is None:
        return False
    return any(isinstance(sub, ast.Attribute) and sub.attr == MARKER
               for sub in ast.walk(node))


def _is_fixture(func: ast.AST) -> bool:
    for deco in getattr(func, "decorator_list", []):
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
        if isinstance(target, ast.Name) and target.id == "fixture":
            return True
    return False


def _pytestmark(body: Iterable[ast.stmt]) -> bool:
    for stmt in body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
                if _holds_marker(stmt.value):
                    return True
    return False


def parse_module(path: Path, source: Optional[str] = None) -> Module:
    """Reads one file's functions, fixtures, marks and ``from X import Y`` names.

    Args:
        path: the file (its text is read unless ``source`` is given).
        source: the file's text, for tests of this scanner.
    """
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    mod = Module(path=path, module_marked=_pytestmark(tree.body))
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module:
            base = stmt.module.rsplit(".", 1)[-1]
            for alias in stmt.names:
                mod.imported[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.functions[stmt.name] = stmt
            if _is_fixture(stmt):
                mod.fixtures.add(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            mod.functions[stmt.name] = stmt  # a helper class spawns if any method does
            if _pytestmark(stmt.body) or any(_holds_marker(d) for d in stmt.decorator_list):
                mod.marked_classes.add(stmt.name)
            for item in stmt.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    key = f"{stmt.name}.{item.name}"
                    mod.functions[key] = item
                    mod.owner_class[key] = stmt.name
                    if _is_fixture(item):
                        mod.fixtures.add(item.name)
    return mod


def direct_spawn(node: ast.AST) -> Optional[str]:
    """The first process start written in ``node``'s body (e.g. ``subprocess.run``), or None."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            base = sub.value.id if isinstance(sub.value, ast.Name) else None
            if base == "subprocess" and sub.attr in SUBPROCESS_CALLS:
                return f"subprocess.{sub.attr}"
            if base == "os" and sub.attr in OS_CALLS:
                return f"os.{sub.attr}"
            if sub.attr in PROCESS_ATTRS or sub.attr in SPAWNING_NAMES:
                return f"{ast.unparse(sub.value)}.{sub.attr}"
        elif isinstance(sub, ast.Name) and sub.id in SPAWNING_NAMES:
            return sub.id
    return None


def _referenced(node: ast.AST) -> Set[str]:
    """Plain names a function reads (calls, callbacks) and its argument (fixture) names."""
    names = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        names |= {a.arg for a in args}
    return names


class Scanner:
    """Follows helpers and fixtures across a test tree to decide which tests spawn.

    Args:
        root: the ``tests/`` folder.
        modules: every parsed ``.py`` file under it (parsed from disk when omitted).
    """

    def __init__(self, root: Path, modules: Optional[List[Module]] = None) -> None:
        self.root = root
        if modules is None:
            modules = [parse_module(p) for p in sorted(root.rglob("*.py"))]
        self.modules = {m.path: m for m in modules}
        self.by_base: Dict[str, Module] = {}
        for mod in modules:
            if mod.path.name != "conftest.py":
                self.by_base.setdefault(mod.path.stem, mod)
        self.memo: Dict[tuple, Optional[str]] = {}

    def conftests(self, path: Path) -> List[Module]:
        """The ``conftest.py`` modules that apply to ``path``, nearest first."""
        found = []
        folder = path.parent
        while True:
            conf = self.modules.get(folder / "conftest.py")
            if conf is not None:
                found.append(conf)
            if folder == self.root or folder == folder.parent:
                return found
            folder = folder.parent

    def _lookup(self, mod: Module, name: str, fixtures_only: bool) -> Optional[tuple]:
        if name in mod.functions and (not fixtures_only or name in mod.fixtures):
            return mod, name
        if name in mod.imported:
            base, orig = mod.imported[name]
            target = self.by_base.get(base)
            if target is not None and orig in target.functions:
                return target, orig
        return None

    def spawns(self, mod: Module, key: str, stack: tuple = ()) -> Optional[str]:
        """Why ``mod``'s function ``key`` starts a process (a call chain), or None."""
        memo_key = (mod.path, key)
        if memo_key in self.memo:
            return self.memo[memo_key]
        if memo_key in stack:
            return None  # recursion: the first visit decides
        node = mod.functions[key]
        reason = direct_spawn(node)
        for name in sorted(_referenced(node)) if reason is None else ():
            found = self._lookup(mod, name, fixtures_only=False)
            for conf in () if found else self.conftests(mod.path):
                found = found or self._lookup(conf, name, fixtures_only=True)
            if found is None or found == (mod, key):
                continue
            inner = self.spawns(found[0], found[1], stack + (memo_key,))
            if inner is not None:
                reason = f"{name} -> {inner}"
                break
        self.memo[memo_key] = reason
        return reason

    def unmarked(self) -> List[str]:
        """``path::test: reason`` for every test that spawns without the marker."""
        problems = []
        for path, mod in sorted(self.modules.items()):
            if not (path.name.startswith("test_") or path.stem.endswith("_test")):
                continue
            for key, node in mod.functions.items():
                cls = mod.owner_class.get(key)
                if not node.name.startswith("test") or (cls and not cls.startswith("Test")):
                    continue
                if mod.module_marked or cls in mod.marked_classes:
                    continue
                if any(_holds_marker(deco) for deco in node.decorator_list):
                    continue
                reason = self.spawns(mod, key)
                if reason is not None:
                    where = path.relative_to(self.root.parent) if path.is_relative_to(
                        self.root.parent) else path
                    problems.append(f"{where}::{key.replace('.', '::')}: starts processes "
                                    f"({reason}) but is not marked {MARKER}")
        return problems


def unmarked_spawning_tests(root: Path) -> List[str]:
    """Every test under ``root`` that starts processes without the ``multiprocess`` marker.

    Args:
        root: the test tree (``tests/``).
    """
    return Scanner(root).unmarked()
