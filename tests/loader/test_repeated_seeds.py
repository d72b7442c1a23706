"""A seed given twice stays twice in its batch, as PyG's loaders keep it: ``batch_size``
counts every seed, each is in its place, and a repeat's output equals its first
occurrence's (it gets the in-edges its first occurrence drew)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist import DistNeighborLoader, DistNeighborSampler


@pytest.fixture
def graph(small_graph):
    data, _, stores, ctx = small_graph
    return data, stores, ctx


def _in_edges(batch, position: int) -> list:
    src, dst = batch.edge_index
    return sorted(zip(batch.n_id[src[dst == position]].tolist(),
                      batch.e_id[dst == position].tolist()))


@pytest.mark.parametrize("fanout", [[-1, -1], [3, 2]])
def test_a_repeated_seed_is_kept_in_its_place(graph, fanout):
    data, stores, ctx = graph
    loader = DistNeighborLoader(data=stores, num_neighbors=fanout, batch_size=3,
                                input_nodes=[5, 5, 7], current_ctx=ctx)
    batch = next(iter(loader))
    loader.close()
    assert batch.batch_size == 3 and batch.n_id[:3].tolist() == [5, 5, 7]
    assert batch.input_id.tolist() == [0, 1, 2] and batch.num_sampled_nodes[0] == 3
    assert torch.equal(batch.x[0], batch.x[1]) and batch.y[0] == batch.y[1]
    assert _in_edges(batch, 1) == _in_edges(batch, 0) != []
    if fanout[0] == -1:  # every in-neighbour of node 5, by original edge id
        into = (data.edge_index[1] == 5).nonzero().view(-1)
        assert sorted(e for _, e in _in_edges(batch, 0)) == sorted(into.tolist())
    src, dst = batch.edge_index
    assert batch.num_sampled_edges[0] == int((dst < 3).sum())  # first-hop edges first
    assert int((src == 1).sum()) == 0  # as a neighbour, node 5 is its first occurrence
    torch.manual_seed(0)
    conv1, conv2 = SAGEConv(data.num_features, 8), SAGEConv(8, 4)
    out = conv2(conv1(batch.x, batch.edge_index).relu(), batch.edge_index)
    assert torch.allclose(out[0], out[1])


def test_repeated_seeds_through_pyg_s_sampler_interface(graph):
    _, stores, ctx = graph
    sampler = DistNeighborSampler(stores, num_neighbors=[2], current_ctx=ctx)
    out = sampler.sample_from_nodes(NodeSamplerInput(torch.arange(5),
                                                     torch.tensor([4, 7, 4, 9, 7])))
    assert out.node[:5].tolist() == [4, 7, 4, 9, 7]
    assert out.metadata[0].tolist() == [0, 1, 2, 3, 4]
