"""Our collate against PyG's: the same sampler output made into a batch by
``torch_geometric.loader.NodeLoader`` / ``LinkLoader`` (PyG's own ``filter_data``
path, which needs no pyg-lib) and by ``DistNeighborLoader`` / ``DistLinkNeighborLoader``
must give the same fields and values."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import LinkLoader, NodeLoader

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader,
                      DistNeighborSampler, LocalFeatureStore, LocalGraphStore, Partitioner,
                      shutdown_rpc)
from pyg_dist.loader._producer import BatchTask
from pyg_dist.testing import encode_ids
from pyg_dist.format import read_id_map


@pytest.fixture(scope="module")
def relabelled(cora, tmp_path_factory):
    """Cora in one partition, and the same graph as a ``Data`` in the relabelled ids."""
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora_collate")
    Partitioner(data, 1, root, progress=False).generate()
    node_map = read_id_map(root)
    edge_map = read_id_map(root, "edge")
    old_to_new = torch.empty_like(node_map)
    old_to_new[node_map] = torch.arange(node_map.numel())
    same = Data(x=data.x[node_map], y=data.y[node_map], nid=data.nid[node_map],
                edge_index=old_to_new[data.edge_index[:, edge_map]], oid=data.oid[edge_map],
                num_nodes=data.num_nodes)
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    yield same, stores
    shutdown_rpc()


def _keyed(sampler: DistNeighborSampler, seed: int) -> DistNeighborSampler:
    """``sampler`` drawing batch ``i``'s randomness from the key the loader gives it,
    ``(seed, epoch 0, batch i, rank 0)``, so both loaders sample the same subgraphs."""
    count = iter(range(1_000_000))
    nodes, edges = sampler.sample_nodes, sampler.sample_edges

    def rng():
        return BatchTask(None, (seed, 0, next(count), 0)).rng()

    sampler.sample_nodes = lambda inputs: nodes(inputs, rng())
    sampler.sample_edges = lambda inputs, neg=None, order=None: edges(inputs, neg, rng(), order)
    return sampler


def _assert_same_batches(ours, theirs) -> None:
    count = 0
    for mine, pyg in zip(ours, theirs, strict=True):
        count += 1
        assert set(pyg.keys()) <= set(mine.keys()), set(pyg.keys()) - set(mine.keys())
        for key in pyg.keys():
            a, b = mine[key], pyg[key]
            if isinstance(b, torch.Tensor):
                assert torch.equal(a, b), key
            else:
                assert a == b, key
        assert mine.num_nodes == pyg.num_nodes
        assert {"x", "edge_index", "n_id", "e_id", "input_id"} <= set(pyg.keys())
    assert count > 1


def test_node_batches_match_pyg_node_loader(relabelled):
    same, stores = relabelled
    ctx = DistContext(rank=0, world_size=1)
    seeds = torch.arange(0, 200, 3)
    ours = DistNeighborLoader(stores, [4, 3], input_nodes=seeds, batch_size=16, seed=5,
                              concurrency=1, current_ctx=ctx)
    sampler = _keyed(DistNeighborSampler(stores, [4, 3], current_ctx=ctx, seed=5), 5)
    theirs = NodeLoader(same, node_sampler=sampler, input_nodes=seeds, batch_size=16)
    _assert_same_batches(ours, theirs)


def test_link_batches_match_pyg_link_loader(relabelled):
    same, stores = relabelled
    ctx = DistContext(rank=0, world_size=1)
    label_index = same.edge_index[:, :64]
    ours = DistLinkNeighborLoader(stores, [3, 2], edge_label_index=label_index,
                                  batch_size=16, seed=9, concurrency=1, current_ctx=ctx)
    sampler = _keyed(DistNeighborSampler(stores, [3, 2], current_ctx=ctx, seed=9), 9)
    theirs = LinkLoader(same, link_sampler=sampler, edge_label_index=label_index,
                        batch_size=16)
    _assert_same_batches(ours, theirs)
