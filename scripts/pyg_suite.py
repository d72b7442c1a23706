"""Runs PyG's own ``test/distributed`` suite against pyg_dist, with the import swapped.

The tests are read from a PyG checkout (a work tree holding ``test/distributed``, or a
git directory and a revision; default ``fada6a60a^``, the last commit that had
``torch_geometric.distributed``) into a temporary folder, never into this repository.
Every import of ``torch_geometric.distributed`` (and its modules) is rewritten to take
the same name from ``pyg_dist``: from the same module path when pyg_dist has it
(``torch_geometric.distributed.event_loop`` -> ``pyg_dist.event_loop``), else from
``pyg_dist`` itself; a name pyg_dist does not have (a PyG internal such as
``RPCRouter``) becomes a placeholder that raises ``NotImplementedError`` naming it when
used, so the tests that do not use it still run.
PyG's ``withMETIS`` marker is lifted (pyg_dist partitions with pymetis).

PyG's tests skip themselves without pyg-lib (``onlyDistributedTest``), and PyG's
single-machine ``NeighborSampler`` they compare with needs it: the script says so and
stops unless ``--without-pyg-lib`` (run anyway: what needs pyg-lib fails saying so) or
``--pyg-lib-reference`` (run on pyg_dist's test-only Python reference of pyg-lib's
sampling ops, :mod:`tests.support.pyg_lib_reference`; no temporal or weighted ops).

Prints one line per test, then ONE JSON line: ``{"pyg_lib": ..., "passed": n,
"failed": n, "skipped": n, "tests": {"file.py::test[params]": {"outcome": ...,
"reason": ...}}}``. Exit code 0 when every test ran passed, 1 when some failed, 2 when
nothing ran (bad input, or pyg-lib missing without a flag).

Usage::

    python scripts/pyg_suite.py PATH_TO_PYG [--rev fada6a60a^] [-k EXPR]
        [--without-pyg-lib | --pyg-lib-reference] [--timeout 300] [--total-timeout 3600]
        [--keep]
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
TEST_DIR = "test/distributed"
PREFIX = "torch_geometric.distributed"
PYG_LIB_MISSING = ("pyg-lib is not installed: PyG's distributed tests skip themselves without "
                   "it (onlyDistributedTest) and the single-machine NeighborSampler they compare "
                   "with needs it. Install pyg-lib, or pass --without-pyg-lib (run anyway) or "
                   "--pyg-lib-reference (pyg_dist's Python reference of its sampling ops).")

SHIM = '''"""Written by pyg_dist's scripts/pyg_suite.py: torch_geometric.distributed names bound
to pyg_dist's, placeholders for PyG internals pyg_dist does not have."""
import importlib
import importlib.util
import os
import types

import pyg_dist


class Missing:
    def __init__(self, name, origin):
        self._what = origin + "." + name

    def _fail(self, *args, **kwargs):
        raise NotImplementedError(self._what + " is a torch_geometric.distributed internal "
                                  "with no pyg_dist equivalent (pyg_suite placeholder)")

    __call__ = _fail

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        self._fail()


def bind(name, origin):
    path = "pyg_dist" + origin[len("torch_geometric.distributed"):]
    places = [pyg_dist]
    if path != "pyg_dist" and importlib.util.find_spec(path) is not None:
        places.insert(0, importlib.import_module(path))
    for place in places:
        if hasattr(place, name):
            return getattr(place, name)
    return Missing(name, origin)


class Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return bind(name, self.__name__)


def module(origin):
    return Module(origin)


if os.environ.get("PYG_SUITE_REFERENCE") == "1":  # also in PyG's spawned children
    import torch_geometric.sampler.utils
    import torch_geometric.typing
    from tests.support.pyg_lib_reference import index_sort, register_ops
    try:
        register_ops()
    except RuntimeError:  # registered already in this process
        pass
    for flag in ("WITH_PYG_LIB", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE",
                 "WITH_WEIGHTED_NEIGHBOR_SAMPLE"):
        setattr(torch_geometric.typing, flag, True)
    torch_geometric.sampler.utils.index_sort = index_sort
'''

CONFTEST = '''import os

import torch_geometric.testing

import _pyg_suite_shim  # noqa: F401  (pyg-lib reference ops, when asked for)

torch_geometric.testing.withMETIS = lambda func: func  # pyg_dist partitions with pymetis
if os.environ.get("PYG_SUITE_FORCE") == "1":  # run although pyg-lib is missing
    torch_geometric.testing.onlyDistributedTest = lambda func: func
'''

INI = "[pytest]\njunit_logging = all\njunit_family = xunit1\n"


def read_tests(pyg: Path, rev: str) -> Dict[str, str]:
    """``{file name: source}`` of PyG's ``test/distributed/test_*.py``."""
    folder = pyg / TEST_DIR
    if folder.is_dir():
        return {p.name: p.read_text() for p in sorted(folder.glob("test_*.py"))}
    git = ["git", f"--git-dir={pyg}"]
    listing = subprocess.run(git + ["ls-tree", "--name-only", f"{rev}:{TEST_DIR}"],
                             capture_output=True, text=True)
    if listing.returncode != 0:
        raise SystemExit(f"pyg_suite: {pyg} is neither a PyG work tree with {TEST_DIR} nor a "
                         f"git directory with revision {rev}: {listing.stderr.strip()}")
    names = [n for n in listing.stdout.split() if n.startswith("test_") and n.endswith(".py")]
    return {n: subprocess.run(git + ["show", f"{rev}:{TEST_DIR}/{n}"], capture_output=True,
                              text=True, check=True).stdout for n in names}


def _replacement(node: ast.stmt, indent: str) -> List[str]:
    """The shim lines replacing one import of ``torch_geometric.distributed``."""
    if isinstance(node, ast.ImportFrom):
        return [f"{indent}{a.asname or a.name} = _pyg_suite_shim.bind({a.name!r}, "
                f"{node.module!r})" for a in node.names]
    out = []
    for alias in node.names:
        if alias.asname is None:  # `import torch_geometric.distributed.x`: keep the name
            out.append(f"{indent}import torch_geometric")
            out.append(f"{indent}torch_geometric.distributed = "
                       f"_pyg_suite_shim.module({PREFIX!r})")
        else:
            out.append(f"{indent}{alias.asname} = _pyg_suite_shim.module({alias.name!r})")
    return out


def _is_ours(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith(PREFIX)
    return isinstance(node, ast.Import) and any(a.name.startswith(PREFIX) for a in node.names)


def swap_imports(source: str) -> str:
    """``source`` with every import of ``torch_geometric.distributed`` bound to pyg_dist."""
    lines = source.splitlines()
    nodes = sorted((n for n in ast.walk(ast.parse(source)) if _is_ours(n)),
                   key=lambda n: n.lineno, reverse=True)
    for node in nodes:
        indent = " " * node.col_offset
        lines[node.lineno - 1:node.end_lineno] = _replacement(node, indent)
    return "import _pyg_suite_shim\n" + "\n".join(lines) + "\n"


def _reason(case: ET.Element) -> Dict[str, str]:
    for tag in ("failure", "error", "skipped"):
        found = case.find(tag)
        if found is not None:
            text = " ".join(filter(None, [found.get("message", ""), found.text or "",
                                          case.findtext("system-err") or ""]))
            out = {"outcome": "skipped" if tag == "skipped" else "failed",
                   "reason": (found.get("message") or "").strip().splitlines()[0][:300]
                   if found.get("message") else ""}
            if "pyg-lib" in text or "pyg_lib" in text:
                out["mentions_pyg_lib"] = "yes"
            if "pyg_suite placeholder" in text:
                out["pyg_internal"] = "yes"
            return out
    return {"outcome": "passed", "reason": ""}


def results(xml: Path) -> Dict[str, Dict[str, str]]:
    """Per test id: outcome and the first line of its message, from pytest's JUnit XML."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[-1] or case.get("file", "?")
        out[f"{module}.py::{case.get('name')}"] = _reason(case)
    return out


def run(tests: Dict[str, str], args: argparse.Namespace, work: Path) -> Optional[Path]:
    """Writes the swapped tests into ``work`` and runs pytest there; the JUnit XML."""
    for name, source in tests.items():
        (work / name).write_text(swap_imports(source))
    (work / "_pyg_suite_shim.py").write_text(SHIM)
    (work / "conftest.py").write_text(CONFTEST)
    (work / "pytest.ini").write_text(INI)
    env = {**os.environ, "DIST_TEST": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(work), os.environ.get("PYTHONPATH", "")])}
    if args.without_pyg_lib or args.pyg_lib_reference:
        env["PYG_SUITE_FORCE"] = "1"
    if args.pyg_lib_reference:
        env["PYG_SUITE_REFERENCE"] = "1"
    xml = work / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-c", str(work / "pytest.ini"), "--rootdir",
           str(work), "-p", "no:cacheprovider", f"--junitxml={xml}", str(work)]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={args.timeout}")
    if args.k:
        cmd += ["-k", args.k]
    proc = subprocess.Popen(cmd, cwd=work, env=env, start_new_session=True)
    try:
        proc.wait(timeout=args.total_timeout)
    except subprocess.TimeoutExpired:  # a test's leftover children keep pytest waiting
        print(f"pyg_suite: pytest still running after --total-timeout "
              f"{args.total_timeout}s: stopped (results so far are lost)", file=sys.stderr)
    finally:  # processes a timed-out test started outlive it: end them with pytest's
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return xml if xml.exists() else None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pyg", type=Path, help="PyG work tree or git directory")
    parser.add_argument("--rev", default="fada6a60a^", help="revision (git directory only)")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--without-pyg-lib", action="store_true")
    parser.add_argument("--pyg-lib-reference", action="store_true")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test")
    parser.add_argument("--total-timeout", type=int, default=3600,
                        help="seconds for the whole run: pytest and every process it "
                             "started are stopped then (PyG's tests can leave children "
                             "that keep pytest waiting)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    has_pyg_lib = importlib.util.find_spec("pyg_lib") is not None
    if not has_pyg_lib:
        print(f"pyg_suite: {PYG_LIB_MISSING}", file=sys.stderr)
        if not (args.without_pyg_lib or args.pyg_lib_reference):
            print(json.dumps({"pyg_lib": False, "ran": False, "reason": PYG_LIB_MISSING}))
            return 2
    tests = read_tests(args.pyg, args.rev)
    work = Path(tempfile.mkdtemp(prefix="pyg_suite_"))
    xml = run(tests, args, work)
    if xml is None:
        print(json.dumps({"pyg_lib": has_pyg_lib, "ran": False, "reason": "pytest wrote no "
                          f"report (see its output above; folder {work})"}))
        return 2
    found = results(xml)
    for name, res in found.items():
        print(f"{res['outcome']:8s} {name}  {res['reason'][:120]}")
    counts = {k: sum(r["outcome"] == k for r in found.values())
              for k in ("passed", "failed", "skipped")}
    mode = "pyg-lib" if has_pyg_lib else \
        ("reference" if args.pyg_lib_reference else "without pyg-lib")
    print(json.dumps({"pyg_lib": has_pyg_lib, "mode": mode, "rev": args.rev, **counts,
                      "folder": str(work) if args.keep else None, "tests": found}))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
