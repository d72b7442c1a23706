"""A small graph in one partition, opened in this process (standalone loaders)."""
from __future__ import annotations

import pytest
import torch

from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, Partitioner, shutdown_rpc
from pyg_dist.datasets import community_graph
from pyg_dist.testing import encode_ids


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory):
    """300 nodes (ids encoded in ``x``) with an integer node time ``time``: the graph,
    its partition folder, its stores and a one-process context."""
    data = encode_ids(community_graph(300, 5.0, 8, 3, seed=0))
    data.time = torch.arange(300) % 13
    root = tmp_path_factory.mktemp("small_graph")
    Partitioner(data, 1, root, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    yield data, root, stores, DistContext(rank=0, world_size=1)
    shutdown_rpc()
