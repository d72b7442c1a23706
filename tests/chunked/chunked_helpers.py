"""Helpers of the chunked-format tests: parquet availability, graph comparison."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from torch_geometric.data import Data

HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None
needs_pyarrow = pytest.mark.skipif(not HAS_PYARROW, reason="pyarrow is not installed "
                                   "(pip install 'pyg_dist[parquet]')")
EDGE_FORMATS = ["numpy", "csv", pytest.param("parquet", marks=needs_pyarrow)]


def assert_same_graph(got, want) -> None:
    """Same class, types, tensors (values, dtypes, shapes) and node counts."""
    assert type(got) is type(want)
    if isinstance(want, Data):
        pairs = [(got, want)]
        assert got.num_nodes == want.num_nodes
    else:
        assert got.node_types == want.node_types and got.edge_types == want.edge_types
        pairs = [(got[t], want[t]) for t in [*want.node_types, *want.edge_types]]
        for t in want.node_types:
            assert got[t].num_nodes == want[t].num_nodes
    for g, w in pairs:
        keys = {k for k, v in w.items() if isinstance(v, torch.Tensor)}
        assert {k for k, v in g.items() if isinstance(v, torch.Tensor)} == keys
        for key in keys:
            assert g[key].dtype == w[key].dtype, key
            assert torch.equal(g[key], w[key]), key
