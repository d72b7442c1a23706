"""The versions the suite runs against (scripts/test.sh runs part of it twice: with the
newest torch_geometric and with the oldest pyproject.toml allows)."""
from __future__ import annotations

import os

import pytest
import torch_geometric


def test_the_intended_torch_geometric_is_imported():
    expected = os.environ.get("PYG_DIST_EXPECT_PYG")
    if expected is None:
        pytest.skip("no PYG_DIST_EXPECT_PYG: the venv's own torch_geometric is tested")
    assert torch_geometric.__version__ == expected, torch_geometric.__file__
