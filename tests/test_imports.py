"""Import contract of ``pyg_dist``: imports point down the layers of :data:`LAYERS`
(lowest first: a package imports only itself and packages of lower layers, never one
of its own layer), no module-level cycle (lazy, function-level imports included, so no
lazy import hides a cycle), no underscore name is used outside the package defining it
(modules of one package, e.g. ``pyg_dist.sampler`` and its private subpackages, may
share underscore names; another package may not use them), and the names of
:data:`ONE_MEANING` are defined in one module only.

Internal modules (``_``-prefixed, see ``tests/test_public_surface.py``) are the
library's own: a package may import another package's internal module (down the
layers), never one of its underscore names.

Every module's AST is parsed, so an import inside a function counts like one at the
top. Each failure names the offending import (``module:line -> target``).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parents[1] / "pyg_dist"

# The layer order, lowest first. A package may import itself and packages of lower
# layers only; packages that share a layer may not import each other.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    # names, the base exception, progress lines and memory probes: they import nothing of ours
    ("typing", ("_typing", "errors", "_madvise", "memory", "_progress")),
    # the on-disk partition format: META, schema, id maps, validation, atomic files
    ("format", ("format",)),
    # offline: named datasets (Planetoid, OGB, synthetic) loaded as Data/HeteroData
    ("datasets", ("datasets",)),
    # offline: DGL-style chunked folders, read chunk by chunk (the partitioner's input)
    ("chunked", ("chunked",)),
    # runtime: one partition opened in one process (PyG GraphStore / FeatureStore)
    ("store", ("store",)),
    # runtime: process groups, RPC, callee registry, collectives, health; knows no sampler
    ("rpc", ("rpc",)),
    # the partitioner: reads Data or chunked folders, writes the format; its multi-machine
    # mode runs on the runtime's process group and health watchdog (rpc)
    ("partition", ("partition",)),
    # converters of PyG datasets into partition folders (run the partitioner)
    ("convert", ("convert",)),
    # runtime: distributed neighbour sampling and feature fetching over rpc
    ("sampler", ("sampler",)),
    # runtime: seeds, collate, node/link loaders and their exact-resume state
    ("loader", ("loader",)),
    # one save/load for everything a job holds, through the Stateful protocol (knows no
    # embedding: tables and optimizers are entries like any other)
    ("checkpoint", ("checkpoint",)),
    # runtime: distributed tensors and embeddings with sparse optimizers
    ("embedding", ("embedding",)),
    # runtime: layer-wise and sampled inference over loaders and DistTensors, export
    ("inference", ("inference",)),
    # the few calls every training script repeats (set-up, resume, JSON result line)
    ("loop", ("loop",)),
    # thin argument parsing over the library, and the package's public surface (with
    # event_loop: torch_geometric.distributed's module name for ConcurrentEventLoop)
    ("cli", ("cli", "__init__", "event_loop")),
    # launch helpers and test graphs: may use anything
    ("testing", ("testing",)),
]

# Names that must have one meaning: defined at module level in one module only.
ONE_MEANING = ("init_rpc", "agree", "Comm")

# Known violations, by key (the part of a message before " (at "). Each must still
# occur (test_pending_entries_still_exist). Empty: a new violation is fixed, not listed.
PENDING: Set[str] = set()


@dataclass(frozen=True)
class Use:
    """One import (or ``X._name`` attribute use) of a ``pyg_dist`` module.

    Args:
        source: the importing module (dotted name).
        line: its line number.
        target: the imported module (dotted name).
        name: the imported name when it is not a module (``from X import name``).
    """
    source: str
    line: int
    target: str
    name: Optional[str] = None

    @property
    def key(self) -> str:
        """``source -> target[.name]`` (no line number: stable under edits)."""
        what = f"{self.target}.{self.name}" if self.name else self.target
        return f"{self.source} -> {what}"

    @property
    def where(self) -> str:
        return f"{MODULES[self.source].relative_to(ROOT.parent)}:{self.line}"


def _modules() -> Dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_pkg = MODULES[module].name == "__init__.py"
    base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _uses(module: str) -> Iterator[Use]:
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    aliases: Dict[str, str] = {}  # local name -> module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES:
                    yield Use(module, node.lineno, a.name)
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            if base not in MODULES:
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in MODULES:
                    yield Use(module, node.lineno, sub)
                    aliases[a.asname or a.name] = sub
                else:
                    yield Use(module, node.lineno, base, a.name)
    for node in ast.walk(tree):  # ``alias._name`` on an imported module
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            yield Use(module, node.lineno, aliases[node.value.id], node.attr)


USES: List[Use] = [u for m in MODULES for u in _uses(m)]


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(module: str) -> int:
    pkg = _package(module)
    for i, (_, packages) in enumerate(LAYERS):
        if pkg in packages:
            return i
    raise AssertionError(f"{module}: package '{pkg}' is in no layer of LAYERS")


def _report(problems: List[Tuple[str, str]], what: str) -> None:
    fresh = sorted(f"{key} ({why})" for key, why in problems if key not in PENDING)
    assert not fresh, f"{len(fresh)} {what}:\n  " + "\n  ".join(fresh)


def layer_violations() -> List[Tuple[str, str]]:
    """(key, reason) of every import of a package that is not in a lower layer."""
    out = []
    for u in USES:
        src, dst = _package(u.source), _package(u.target)
        if src == dst or src == "testing":
            continue
        a, b = _layer(u.source), _layer(u.target)
        if b > a:
            out.append((u.key, f"at {u.where}: layer '{LAYERS[a][0]}' imports layer "
                               f"'{LAYERS[b][0]}' above it"))
        elif a == b:
            out.append((u.key, f"at {u.where}: packages {src} and {dst} share layer "
                               f"'{LAYERS[a][0]}' and may not import each other"))
    return out


def private_uses() -> List[Tuple[str, str]]:
    """(key, reason) of every underscore name used outside the package defining it."""
    return [(u.key, f"at {u.where}: underscore name used outside its package")
            for u in USES if u.name and u.name.startswith("_")
            and _package(u.target) != _package(u.source)]


def cycles() -> List[Tuple[str, str]]:
    """(key, imports closing it) of every strongly connected component of more than one
    module in the import graph."""
    graph: Dict[str, List[Use]] = {m: [] for m in MODULES}
    for u in USES:
        if u.target != u.source:
            graph[u.source].append(u)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[Set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for u in graph[v]:
            if u.target not in index:
                visit(u.target)
                low[v] = min(low[v], low[u.target])
            elif u.target in stack:
                low[v] = min(low[v], index[u.target])
        if low[v] == index[v]:
            comp = set(stack[stack.index(v):])
            del stack[stack.index(v):]
            if len(comp) > 1:
                found.append(comp)

    for m in sorted(graph):
        if m not in index:
            visit(m)
    out = []
    for comp in found:
        edges = sorted(f"{u.key} at {u.where}" for m in comp for u in graph[m]
                       if u.target in comp)
        out.append((f"cycle {sorted(comp)}", "through: " + "; ".join(edges)))
    return out


def duplicate_names() -> List[Tuple[str, str]]:
    """(key, reason) of every name of :data:`ONE_MEANING` defined in several modules."""
    where: Dict[str, List[str]] = {name: [] for name in ONE_MEANING}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and node.name in where:
                where[node.name].append(module)
    return [(f"{name} defined in {sorted(mods)}", "one name, one meaning: rename all but one")
            for name, mods in where.items() if len(mods) > 1]


def test_every_package_has_a_layer() -> None:
    for m in MODULES:
        _layer(m)


def test_imports_point_down_the_layers() -> None:
    _report(layer_violations(), "imports that do not point down the layers")


def test_no_import_cycles() -> None:
    _report(cycles(), "import cycles")


def test_no_underscore_names_across_packages() -> None:
    _report(private_uses(), "underscore names used across packages")


def test_one_meaning_per_name() -> None:
    _report(duplicate_names(), "names with several meanings")


def test_pending_entries_still_exist() -> None:
    """The allowlist only shrinks: an entry that no longer occurs must be deleted."""
    current = {key for check in (layer_violations, cycles, private_uses, duplicate_names)
               for key, _ in check()}
    assert PENDING <= current, f"stale PENDING entries: {sorted(PENDING - current)}"


def test_checks_name_the_offending_import(tmp_path: Path) -> None:
    """The checks see function-level imports and name the import that breaks a rule."""
    fake = Use("pyg_dist.rpc._registry", 7, "pyg_dist.sampler._serving", "_served")
    USES.append(fake)
    try:
        assert any(k == fake.key and "layer 'rpc' imports layer 'sampler'" in why
                   for k, why in layer_violations())
        assert any(k == fake.key for k, _ in private_uses())
        assert any("pyg_dist.rpc._registry" in k for k, _ in cycles())
    finally:
        USES.remove(fake)
    inside = Use("pyg_dist.sampler._local", 7, "pyg_dist.sampler._cache.file", "_older")
    USES.append(inside)
    try:  # one package: sampler and its private subpackage share underscore names
        assert not any(k == inside.key for k, _ in private_uses())
    finally:
        USES.remove(inside)
    lazy = [u for u in USES if u.source == "pyg_dist.loader._workers"  # inside a function
            and u.target == "pyg_dist.sampler._warmup"]
    assert lazy, "function-level imports must be part of the graph"


if __name__ == "__main__":  # print today's violations, allowlisted ones included
    for check in (layer_violations, cycles, private_uses, duplicate_names):
        for key, why in check():
            print(("PENDING " if key in PENDING else "") + f"{key} ({why})")
