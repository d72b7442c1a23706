"""Small graphs for the chunked-format tests (ids encoded in features)."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from torch_geometric.data import Data, HeteroData

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


@pytest.fixture
def homo_graph() -> Data:
    """60 nodes, edge attributes and edge times, node ids encoded in ``x``."""
    from pyg_dist.datasets.synthetic import community_graph

    data = community_graph(60, 4.0, 3, 3, seed=0)
    num_edges = data.edge_index.size(1)
    data.x[:, 0] = torch.arange(60, dtype=data.x.dtype)
    data.edge_attr = torch.randn(num_edges, 2, generator=torch.Generator().manual_seed(0))
    data.time = torch.arange(num_edges, dtype=torch.long) * 3
    data.node_code = torch.arange(60, dtype=torch.int32)
    return data


@pytest.fixture
def small_hetero() -> HeteroData:
    """Three node types, edge attributes and times (``hetero_community_graph``)."""
    from pyg_dist.datasets.synthetic import hetero_community_graph

    return hetero_community_graph(120, avg_degree=3, feat_dim=4, seed=1)
