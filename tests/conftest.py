"""Shared fixtures: the real Cora graph (carried in ``tests/data``) and small synthetic graphs.

Also the run-time half of the ``multiprocess`` rule: a test that starts a process (its
own code, a fixture or a library call) without the marker fails at teardown, so
``pytest -m "not multiprocess"`` stays a one-process inner loop.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, Iterator

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: 2 cores, many workers

import pytest  # noqa: E402

from tests.support.spawn_guard import SpawnGuard  # noqa: E402

PLANETOID = Path(__file__).resolve().parent / "data" / "planetoid"


@pytest.fixture(scope="session")
def planetoid_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of ``tests/data/planetoid`` (never written in place)."""
    if not (PLANETOID / "Cora" / "raw").is_dir():
        pytest.fail(f"the Cora test data is missing: {PLANETOID}/Cora/raw (see tests/data/README.md)")
    root = tmp_path_factory.mktemp("planetoid")
    shutil.copytree(PLANETOID / "Cora", root / "Cora")
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


@pytest.fixture(scope="session")
def cora(planetoid_root: Path):
    from pyg_dist.datasets._loading import load_planetoid

    return load_planetoid(planetoid_root, "Cora")


@pytest.fixture(scope="session")
def hetero_graph():
    from pyg_dist.datasets import hetero_community_graph

    return hetero_community_graph(3000, avg_degree=6, feat_dim=8, seed=1)


GUARD = SpawnGuard()


def pytest_configure(config: pytest.Config) -> None:
    GUARD.install()
    # pytest-xdist (3.6+) would reorder files by their number of tests; keep the order
    # pytest_collection_modifyitems gives (the longest files first)
    if getattr(config.option, "loadscopereorder", None) is not None:
        config.option.loadscopereorder = False


def pytest_unconfigure(config: pytest.Config) -> None:
    GUARD.uninstall()


def _cost(item: pytest.Item) -> float:
    """A test's expected cost, for ordering: a ``multiprocess`` test's timeout (each is
    sized to what the test takes under load), 1 for a one-process test."""
    if item.get_closest_marker("multiprocess") is None:
        return 1.0
    mark = item.get_closest_marker("timeout")
    return float(mark.args[0]) if mark is not None and mark.args else 300.0


@pytest.hookimpl(trylast=True)  # after -m and -k deselected what does not run
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """The costliest files first (:func:`_cost` summed over the tests selected), each
    file's tests kept together and in order: under ``pytest -n N --dist loadfile``
    (scripts/test.sh) the long files then start first and the quick ones fill the gaps,
    instead of a long file with few tests (a kill walk) starting last."""
    cost: Dict[Path, float] = {}
    for item in items:
        cost[item.path] = cost.get(item.path, 0.0) + _cost(item)
    items.sort(key=lambda item: -cost[item.path])  # stable: keeps the order within


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem) -> Iterator[None]:
    GUARD.begin()
    try:
        yield
    finally:
        GUARD.end()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if call.when != "teardown" or item.get_closest_marker("multiprocess") is not None:
        return
    seen = tuple(GUARD.current or ())
    if seen and report.outcome == "passed":
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started processes but is not marked multiprocess "
                           f"(add @pytest.mark.multiprocess or a module pytestmark): "
                           + "; ".join(seen))
