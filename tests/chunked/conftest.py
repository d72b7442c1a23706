"""Small graphs for the chunked-format tests (ids encoded in features)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data, HeteroData


@pytest.fixture
def homo_graph() -> Data:
    """60 nodes, edge attributes and edge times, node ids encoded in ``x``."""
    from pyg_dist.datasets import community_graph

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
    from pyg_dist.datasets import hetero_community_graph

    return hetero_community_graph(120, avg_degree=3, feat_dim=4, seed=1)
