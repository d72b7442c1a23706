"""Stores built in memory with a partition book set by hand, as PyG's tests and tutorial
build them, sampled on 2 and 3 ranks: the same sample as single-machine PyG.

Each rank builds ``LocalFeatureStore.from_data(node_id)`` over the nodes it holds and
``LocalGraphStore.from_data(edge_id, edge_index, num_nodes, is_sorted=True)`` over the
edges it holds (its own nodes' in-edges *and* the out-edges of its nodes owned
elsewhere, as PyG's test does), then sets ``node_pb``, ``num_partitions`` and
``partition_idx``. Ground truth is PyG's ``NeighborSampler`` over the union graph (on
:mod:`tests.support.pyg_lib_reference`'s ops).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NeighborSampler, NodeSamplerInput
from torch_geometric.sampler.neighbor_sampler import node_sample

from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore
from pyg_dist.rpc import shutdown_rpc
from pyg_dist.testing import run_ranks
from tests.support.pyg_lib_reference import reference_ops

pytestmark = pytest.mark.multiprocess

NUM_NODES = 24
SEEDS = [[4, 9], [1, 6, 22], [17, 3]]  # per rank; any owner


def _graph() -> Data:
    """Every node has 0-3 in-edges, sorted by destination (the order within one is
    unrelated to ids); a node's time is its id's last digit."""
    g = torch.Generator().manual_seed(3)
    dst = torch.arange(NUM_NODES).repeat_interleave(torch.randint(0, 4, (NUM_NODES,),
                                                                  generator=g))
    src = torch.randint(0, NUM_NODES, (dst.numel(),), generator=g)
    return Data(edge_index=torch.stack([src, dst]), num_nodes=NUM_NODES,
                time=torch.arange(NUM_NODES) % 10)


def _book(num_parts: int) -> torch.Tensor:
    return torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(7)) % num_parts


def _stores(data: Data, book: torch.Tensor, rank: int, with_ids: bool, time: bool):
    """Rank ``rank``'s stores as PyG's test builds them."""
    src, dst = data.edge_index
    held = (book[dst] == rank) | (book[src] == rank)  # kept order: still sorted by dst
    node_id = torch.unique(torch.cat([torch.nonzero(book == rank).view(-1),
                                      src[held], dst[held]]))
    features = LocalFeatureStore.from_data(node_id)
    graph = LocalGraphStore.from_data(
        edge_id=torch.nonzero(held).view(-1) if with_ids else None,
        edge_index=data.edge_index[:, held], num_nodes=NUM_NODES, is_sorted=True)
    graph.node_pb = book
    graph.meta.update({"num_parts": int(book.max()) + 1})
    graph.partition_idx = rank
    graph.num_partitions = int(book.max()) + 1
    if time:  # every node's time, as PyG's test puts it
        features.put_tensor(data.time, group_name=None, attr_name="time")
    return features, graph


def _job(num_parts: int, disjoint: bool, with_ids: bool, time_attr: Optional[str]) -> Dict:
    rank = int(os.environ["RANK"])
    data = _graph()
    stores = _stores(data, _book(num_parts), rank, with_ids, time_attr is not None)
    try:
        sampler = DistNeighborSampler(stores, num_neighbors=[-1, -1],
                                      current_ctx=DistContext.from_env(rpc_timeout=20),
                                      disjoint=disjoint, time_attr=time_attr)
        out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor(SEEDS[rank])))
        return {k: getattr(out, k) for k in ("node", "row", "col", "edge", "batch",
                                             "num_sampled_nodes", "num_sampled_edges")}
    finally:
        shutdown_rpc()


def _reference(seeds: List[int], disjoint: bool, time_attr: Optional[str]):
    with reference_ops():
        sampler = NeighborSampler(_graph(), num_neighbors=[-1, -1], disjoint=disjoint,
                                  time_attr=time_attr)
        out = node_sample(NodeSamplerInput(None, torch.tensor(seeds)), sampler._sample)
    if sampler.edge_permutation is not None:
        out.edge = sampler.edge_permutation[out.edge]
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("disjoint,with_ids,time_attr", [
    (False, True, None), (True, False, None), (True, True, "time")])
@pytest.mark.parametrize("num_parts", [2, 3])
def test_memory_stores_sample_as_single_machine_pyg(num_parts, disjoint, with_ids, time_attr):
    results = run_ranks(_job, num_parts, num_parts, disjoint, with_ids, time_attr,
                        timeout=150)
    for rank, got in enumerate(results):
        want = _reference(SEEDS[rank], disjoint, time_attr)
        keys = ["node", "row", "col"] + (["edge"] if with_ids else []) + \
            (["batch"] if disjoint else [])
        for key in keys:
            assert torch.equal(got[key], getattr(want, key)), (rank, key, got[key].tolist(),
                                                               getattr(want, key).tolist())
        assert got["num_sampled_nodes"] == want.num_sampled_nodes
        assert got["num_sampled_edges"] == want.num_sampled_edges
        if not with_ids:  # an edge's id: its position among all partitions' edges
            assert got["edge"].unique().numel() == got["edge"].numel() or disjoint
            assert int(got["edge"].max()) < _graph().num_edges


def _bad_job(case: str) -> None:
    rank = int(os.environ["RANK"])
    data = _graph()
    features, graph = _stores(data, _book(2), rank, True, False)
    if case == "no book":
        graph.node_pb = None
    elif case == "parts":  # the ranks disagree: found as they join, raised on both
        graph.num_partitions = 2 + rank
        graph.meta["num_parts"] = 2 + rank
    elif case == "book":
        graph.node_pb = _book(2)[:-1]
    try:
        sampler = DistNeighborSampler((features, graph), num_neighbors=[2],
                                      current_ctx=DistContext.from_env(rpc_timeout=20))
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([rank])))
    finally:
        shutdown_rpc()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case,message", [
    ("no book", "need a partition book"), ("parts", "num_parts"),
    ("book", "node_pb has 23 entries")])
def test_memory_store_errors_name_the_problem_on_every_rank(case, message):
    from pyg_dist.testing import RanksFailed

    with pytest.raises(RanksFailed) as info:
        run_ranks(_bad_job, 2, case, timeout=90)
    text = str(info.value)
    assert message in text
    assert "rank 0" in text and "rank 1" in text


def _loader_job(num_parts: int) -> Dict:
    from pyg_dist import DistNeighborLoader

    rank = int(os.environ["RANK"])
    data = _graph()
    book = _book(num_parts)
    features, graph = _stores(data, book, rank, True, False)
    held = features.get_global_id(None)
    features.put_tensor(held.float().view(-1, 1) * 10, group_name=None, attr_name="x")
    try:
        loader = DistNeighborLoader((features, graph), num_neighbors=[2, 2],
                                    input_nodes=torch.nonzero(book == rank).view(-1),
                                    batch_size=3, current_ctx=DistContext.from_env(
                                        rpc_timeout=20))
        return [(b.n_id, b.x, b.e_id, b.edge_index, b.batch_size) for b in loader]
    finally:
        shutdown_rpc()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts", [2, 3])
def test_loader_over_memory_stores_gives_the_union_graphs_rows(num_parts):
    data = _graph()
    results = run_ranks(_loader_job, num_parts, num_parts, timeout=150)
    seeds = []
    for rank, batches in enumerate(results):
        assert batches, rank
        for n_id, x, e_id, edge_index, size in batches:
            assert torch.equal(x.view(-1), n_id.float() * 10)  # every row its node's
            src, dst = data.edge_index[:, e_id]  # e_id: the ids put with the edges
            assert torch.equal(n_id[edge_index[0]], src)
            assert torch.equal(n_id[edge_index[1]], dst)
            seeds += n_id[:size].tolist()
    assert sorted(seeds) == list(range(NUM_NODES))
