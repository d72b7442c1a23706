"""Driving a ``DistNeighborSampler`` by hand as ``torch_geometric.distributed``'s users
do, in one process (a one-partition job): built outside RPC it joins on first use, or
the group PyG's ``init_rpc`` joined; ``node_sample`` / ``edge_sample`` on a
``ConcurrentEventLoop`` give what ``sample_from_nodes`` / ``sample_from_edges`` give, and
``edge_sample``'s PyG arguments are checked (2 and 3 partitions against single-machine
PyG: tests/distributed/test_pyg_order.py)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from pyg_dist import (DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore,
                      Partitioner, init_rpc, shutdown_rpc)
from pyg_dist.datasets import community_graph
from pyg_dist.event_loop import ConcurrentEventLoop
from pyg_dist.rpc import _runtime as runtime

FIELDS = ("node", "row", "col", "edge", "batch", "num_sampled_nodes", "num_sampled_edges")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory):
    data = community_graph(60, avg_degree=3, feat_dim=2, num_classes=2, seed=4)
    root = tmp_path_factory.mktemp("driving") / "one"
    Partitioner(data, 1, root, progress=False).generate()
    yield LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0)
    shutdown_rpc()


def _same(a, b) -> None:
    for key in FIELDS:
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None and y is None) or (torch.equal(x, y) if isinstance(x, torch.Tensor)
                                             else x == y), key


def test_built_outside_rpc_it_joins_the_group_pygs_init_rpc_joined(stores):
    shutdown_rpc()  # an earlier test's group: this one starts outside RPC
    ctx = DistContext(0, 0, 1, 1, "dist-sampler-test")
    sampler = DistNeighborSampler(data=stores, current_ctx=ctx, num_neighbors=[-1, -1])
    assert not runtime.is_initialized()  # nothing joined at construction
    group = init_rpc(current_ctx=ctx, master_addr="localhost", master_port=29500)
    sampler.init_sampler_instance()
    sampler.register_sampler_rpc()
    assert sampler.group is group and group.served["sampler"] is sampler.local
    sampler.event_loop = ConcurrentEventLoop(2)
    sampler.event_loop.start_loop()
    try:
        seeds = NodeSamplerInput(None, torch.tensor([5, 17, 5]))
        _same(sampler.event_loop.run_task(coro=sampler.node_sample(seeds)),
              sampler.sample_from_nodes(seeds))
        links = EdgeSamplerInput(None, torch.tensor([3, 40]), torch.tensor([8, 3]))
        out = sampler.event_loop.run_task(coro=sampler.edge_sample(
            links, sampler.node_sample, 60, False, node_time=None, neg_sampling=None))
        _same(out, sampler.sample_from_edges(links))
        assert out.node[:3].tolist() == [3, 8, 40]  # PyG's order: original ids, sorted
    finally:
        sampler.event_loop.close()
        shutdown_rpc()


def test_used_first_it_joins_by_itself(stores):
    shutdown_rpc()
    sampler = DistNeighborSampler(stores, num_neighbors=[-1], current_ctx=DistContext())
    assert not runtime.is_initialized()
    try:
        out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([7])))
        assert runtime.is_initialized() and out.node[0] == 7
    finally:
        shutdown_rpc()


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(num_nodes=59), ValueError, r"num_nodes=59 but the partitioned graph has 60"),
    (dict(num_nodes={"paper": 60}), ValueError, r"num_nodes \{'paper': 60\} disagrees"),
    (dict(num_nodes="60"), TypeError, r"num_nodes must be an int or a dict"),
    (dict(disjoint=True), ValueError, r"edge_sample\(disjoint=True\) but this sampler"),
    (dict(sample_fn=lambda inputs: None), NotImplementedError, r"another sample_fn"),
    (dict(node_time=torch.zeros(60), neg_sampling=NegativeSampling("binary")),
     NotImplementedError, r"bounds negatives by its own node-level time_attr"),
])
def test_edge_sample_checks_pygs_arguments(stores, kwargs, error, match):
    sampler = DistNeighborSampler(stores, num_neighbors=[-1], current_ctx=DistContext())
    args = {"sample_fn": sampler.node_sample, "num_nodes": 60, "disjoint": False, **kwargs}
    links = EdgeSamplerInput(None, torch.tensor([3]), torch.tensor([8]))
    loop = ConcurrentEventLoop(1)
    loop.start_loop()
    try:
        with pytest.raises(error, match=match):
            loop.run_task(sampler.edge_sample(links, **args))
        with pytest.raises(TypeError, match="takes a NodeSamplerInput"):
            loop.run_task(sampler.node_sample(links))
    finally:
        loop.close()
