"""Heterogeneous stores built in memory with a partition book by node type, as PyG's
tests build them, sampled on 2 and 3 ranks: the same sample as single-machine PyG.

Each rank builds ``LocalFeatureStore.from_hetero_data(node_id_dict, x_dict)`` over the
nodes it holds and ``LocalGraphStore.from_hetero_data(edge_id_dict, edge_index_dict,
num_nodes_dict)`` over the edges it holds (its own nodes' in-edges and the out-edges of
its nodes owned elsewhere, unsorted), then sets ``node_pb`` (a dict by node type),
``num_partitions`` and ``partition_idx``. Ground truth is PyG's ``NeighborSampler``
over the union ``HeteroData`` (on :mod:`tests.support.pyg_lib_reference`'s ops).
"""
from __future__ import annotations

import os
from typing import Dict, List

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.sampler import NeighborSampler, NodeSamplerInput
from torch_geometric.sampler.neighbor_sampler import node_sample

from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore
from pyg_dist.rpc import shutdown_rpc
from pyg_dist.testing import run_ranks
from tests.support.pyg_lib_reference import reference_ops

pytestmark = pytest.mark.multiprocess

NUM = {"a": 20, "b": 13}
# in sorted order: the reference op visits edge types sorted, pyg-lib and pyg_dist in the
# graph's order; with both the same, a hop lists its nodes in one order
TYPES = [("a", "self", "a"), ("a", "to", "b"), ("b", "to", "a")]
SEEDS = [[4, 9], [1, 6, 17], [12, 3]]  # nodes of type "a", per rank; any owner


def _graph() -> HeteroData:
    """Every destination has 0-3 in-edges of each type; rows of ``x`` name their node."""
    g = torch.Generator().manual_seed(11)
    data = HeteroData()
    for node_type, n in NUM.items():
        data[node_type].x = torch.arange(n, dtype=torch.float).view(-1, 1) + \
            (1000 if node_type == "b" else 0)
    for src, rel, dst in TYPES:
        dst_ids = torch.arange(NUM[dst]).repeat_interleave(
            torch.randint(0, 4, (NUM[dst],), generator=g))
        src_ids = torch.randint(0, NUM[src], (dst_ids.numel(),), generator=g)
        perm = torch.randperm(dst_ids.numel(), generator=g)  # not sorted by anything
        data[src, rel, dst].edge_index = torch.stack([src_ids, dst_ids])[:, perm]
    return data


def _books(num_parts: int) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return {t: torch.randperm(n, generator=g) % num_parts for t, n in NUM.items()}


def _stores(data: HeteroData, books: Dict[str, torch.Tensor], rank: int):
    """Rank ``rank``'s stores as PyG's tests build them (edges unsorted)."""
    held_ids, edge_ids, edge_index = {}, {}, {}
    nodes = {t: [torch.nonzero(book == rank).view(-1)] for t, book in books.items()}
    for edge_type in TYPES:
        src_type, _, dst_type = edge_type
        src, dst = data[edge_type].edge_index
        held = (books[dst_type][dst] == rank) | (books[src_type][src] == rank)
        edge_ids[edge_type] = torch.nonzero(held).view(-1)
        edge_index[edge_type] = data[edge_type].edge_index[:, held]
        nodes[src_type].append(src[held])
        nodes[dst_type].append(dst[held])
    for node_type, parts in nodes.items():
        held_ids[node_type] = torch.unique(torch.cat(parts))
    features = LocalFeatureStore.from_hetero_data(
        held_ids, x_dict={t: data[t].x[ids] for t, ids in held_ids.items()})
    graph = LocalGraphStore.from_hetero_data(edge_ids, edge_index, dict(NUM))
    graph.node_pb = books
    num_parts = int(max(int(book.max()) for book in books.values())) + 1
    graph.meta.update({"num_parts": num_parts})
    graph.partition_idx = rank
    graph.num_partitions = num_parts
    return features, graph


def _job(num_parts: int, disjoint: bool) -> Dict:
    rank = int(os.environ["RANK"])
    stores = _stores(_graph(), _books(num_parts), rank)
    try:
        sampler = DistNeighborSampler(stores, num_neighbors=[-1, -1], disjoint=disjoint,
                                      current_ctx=DistContext.from_env(rpc_timeout=20))
        out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor(SEEDS[rank]),
                                                         input_type="a"))
        return {k: getattr(out, k) for k in ("node", "row", "col", "edge", "batch",
                                             "num_sampled_nodes", "num_sampled_edges")}
    finally:
        shutdown_rpc()


def _reference(seeds: List[int], disjoint: bool):
    with reference_ops():
        sampler = NeighborSampler(_graph(), num_neighbors=[-1, -1], disjoint=disjoint)
        out = node_sample(NodeSamplerInput(None, torch.tensor(seeds), input_type="a"),
                          sampler._sample)
    if sampler.edge_permutation is not None:
        out.edge = {t: sampler.edge_permutation[t][e] if sampler.edge_permutation.get(t)
                    is not None else e for t, e in out.edge.items()}
    return out


def _equal_dicts(got, want, what):
    keys = {k for k, v in want.items() if v.numel() > 0} | \
        {k for k, v in got.items() if v.numel() > 0}
    for key in keys:
        assert key in got and key in want, (what, key)
        assert torch.equal(got[key], want[key]), (what, key, got[key].tolist(),
                                                  want[key].tolist())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts,disjoint", [(2, False), (3, True)])
def test_hetero_memory_stores_sample_as_single_machine_pyg(num_parts, disjoint):
    results = run_ranks(_job, num_parts, num_parts, disjoint, timeout=150)
    for rank, got in enumerate(results):
        want = _reference(SEEDS[rank], disjoint)
        for key in ["node", "row", "col", "edge"] + (["batch"] if disjoint else []):
            _equal_dicts(got[key], getattr(want, key), (rank, key))
        for key in ("num_sampled_nodes", "num_sampled_edges"):
            nonzero = {k: v for k, v in got[key].items() if any(v)}
            assert nonzero == {k: v for k, v in getattr(want, key).items() if any(v)}, \
                (rank, key)


def _loader_job(num_parts: int) -> List:
    from pyg_dist import DistNeighborLoader

    rank = int(os.environ["RANK"])
    books = _books(num_parts)
    stores = _stores(_graph(), books, rank)
    try:
        loader = DistNeighborLoader(stores, num_neighbors=[2, 2], batch_size=3,
                                    even_batches=False,  # each seed once
                                    input_nodes=("a", torch.nonzero(books["a"] == rank)
                                                 .view(-1)),
                                    current_ctx=DistContext.from_env(rpc_timeout=20))
        return [{t: (b[t].n_id, b[t].x) for t in b.node_types} |
                {t: (b[t].e_id, b[t].edge_index) for t in b.edge_types} |
                {"size": b["a"].batch_size} for b in loader]
    finally:
        shutdown_rpc()


@pytest.mark.timeout(180)
def test_hetero_loader_over_memory_stores_gives_the_union_graphs_rows():
    data = _graph()
    results = run_ranks(_loader_job, 3, 3, timeout=150)
    seeds = []
    for batches in results:
        assert batches
        for batch in batches:
            for t in NUM:
                if t in batch:
                    n_id, x = batch[t]
                    assert torch.equal(x, data[t].x[n_id])  # every row its node's
            for edge_type in TYPES:
                if edge_type not in batch:
                    continue
                e_id, edge_index = batch[edge_type]
                src, dst = data[edge_type].edge_index[:, e_id]  # e_id: the ids put
                assert torch.equal(batch[edge_type[0]][0][edge_index[0]], src)
                assert torch.equal(batch[edge_type[2]][0][edge_index[1]], dst)
            seeds += batch["a"][0][:batch["size"]].tolist()
    assert sorted(seeds) == list(range(NUM["a"]))
