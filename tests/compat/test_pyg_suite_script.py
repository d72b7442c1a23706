"""``scripts/pyg_suite.py``: PyG's distributed tests with the import swapped to pyg_dist.

A small stand-in checkout (two tests written here, in PyG's import style) is enough to
check the swap, the placeholders for PyG internals, the pyg-lib message and the JSON
line; the real suite needs a PyG checkout and pyg-lib (see the script)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pyg_suite.py"
SPEC = importlib.util.spec_from_file_location("pyg_suite", SCRIPT)
pyg_suite = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(pyg_suite)

STAND_IN = '''import torch
from torch_geometric.distributed import (
    LocalFeatureStore,
    LocalGraphStore,
)
from torch_geometric.distributed.event_loop import ConcurrentEventLoop
from torch_geometric.distributed.utils import remove_duplicates
import torch_geometric.distributed.rpc as rpc


def test_store_in_memory():
    store = LocalFeatureStore.from_data(torch.tensor([2, 0]), torch.eye(2))
    assert torch.equal(store.get_tensor_from_global_id(None, "x", index=torch.tensor([0])),
                       torch.eye(2)[[1]])


def test_event_loop():
    import pyg_dist.event_loop

    assert ConcurrentEventLoop is pyg_dist.event_loop.ConcurrentEventLoop
    assert rpc.shutdown_rpc is pyg_dist.shutdown_rpc  # pyg_dist.rpc's, the same function
    loop = ConcurrentEventLoop(2)
    loop.start_loop()

    async def three():
        return 3

    assert loop.run_task(coro=three()) == 3
    loop.close()


def test_internal():
    remove_duplicates(None, None)


def test_module_internal():
    def inner():
        from torch_geometric.distributed.rpc import RPCRouter
        return RPCRouter
    inner()([])
'''


def test_swap_imports_binds_pyg_dist_names() -> None:
    out = pyg_suite.swap_imports(STAND_IN)
    assert "torch_geometric.distributed import" not in out
    assert "LocalGraphStore = _pyg_suite_shim.bind('LocalGraphStore', " \
           "'torch_geometric.distributed')" in out
    assert "rpc = _pyg_suite_shim.module('torch_geometric.distributed.rpc')" in out
    assert "        RPCRouter = _pyg_suite_shim.bind('RPCRouter', " in out  # indented
    compile(out, "swapped", "exec")


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_script_reports_each_test_as_one_json_line(tmp_path) -> None:
    folder = tmp_path / "pyg" / "test" / "distributed"
    folder.mkdir(parents=True)
    (folder / "test_stand_in.py").write_text(STAND_IN)
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "pyg"),
                           "--without-pyg-lib"], capture_output=True, text=True, timeout=280)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    tests = report["tests"]
    for name in ("test_store_in_memory", "test_event_loop"):  # by module path
        assert tests[f"test_stand_in.py::{name}"]["outcome"] == "passed", tests
    for name in ("test_internal", "test_module_internal"):
        result = tests[f"test_stand_in.py::{name}"]
        assert result["outcome"] == "failed" and result["pyg_internal"] == "yes"
    assert (report["passed"], report["failed"], done.returncode) == (2, 2, 1)
    if not report["pyg_lib"]:
        assert "pyg-lib is not installed" in done.stderr
        stopped = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "pyg")],
                                 capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 2
        assert json.loads(stopped.stdout)["ran"] is False
