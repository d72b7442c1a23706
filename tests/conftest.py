"""Shared fixtures: the real Cora graph (carried in ``tests/data``) and small synthetic graphs."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
    from pyg_dist.datasets.loading import load_planetoid

    return load_planetoid(planetoid_root, "Cora")


@pytest.fixture(scope="session")
def hetero_graph():
    from pyg_dist.datasets.synthetic import hetero_community_graph

    return hetero_community_graph(3000, avg_degree=6, feat_dim=8, seed=1)
