"""Fixtures of the sampler tests: small graphs partitioned once per session."""
from __future__ import annotations

import pytest
import torch

from pyg_dist import Partitioner
from pyg_dist.testing import encode_ids
from sampler_helpers import Parted, load_parted, small_hetero


@pytest.fixture(scope="session")
def hetero_parted(tmp_path_factory: pytest.TempPathFactory) -> Parted:
    root = tmp_path_factory.mktemp("hetero_parted") / "out"
    Partitioner(small_hetero(), 2, root, method="random", progress=False).generate()
    return load_parted(root, 2)


@pytest.fixture(scope="session")
def homo_parted(tmp_path_factory: pytest.TempPathFactory) -> Parted:
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(3)
    n, e = 300, 2000
    data = Data(x=torch.randn(n, 6, generator=g),
                edge_index=torch.randint(0, n, (2, e), generator=g),
                y=torch.randint(0, 4, (n,), generator=g), w=torch.rand(e, generator=g),
                time=torch.randint(0, 50, (n,), generator=g))
    root = tmp_path_factory.mktemp("homo_parted") / "out"
    Partitioner(encode_ids(data), 2, root, method="random", progress=False).generate()
    return load_parted(root, 2)
