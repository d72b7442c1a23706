"""subgraph_type: "bidirectional" batches equal PyG's own conversion of the same
directional sample (``SamplerOutput.to_bidirectional``), "induced" ones hold every edge
between their nodes; homogeneous and heterogeneous, through the sampler's PyG interface
and the loaders (one partition; over 2 and 3 partitions: the ground-truth tests of
tests/distributed/test_loader.py)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader,
                      DistNeighborSampler, LocalFeatureStore, LocalGraphStore, Partitioner)
from pyg_dist.rpc import shutdown_rpc
from pyg_dist.testing import encode_ids


def _one_partition(data, root):
    Partitioner(data, 1, root, progress=False).generate()
    return (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))


@pytest.fixture(scope="module")
def parts(cora, hetero_graph, tmp_path_factory):
    homo = encode_ids(cora)
    out = {"homo": (homo, _one_partition(homo, tmp_path_factory.mktemp("c"))),
           "hetero": (hetero_graph, _one_partition(hetero_graph, tmp_path_factory.mktemp("h")))}
    yield out, DistContext(rank=0, world_size=1)
    shutdown_rpc()


def _pairs(row, col, src, dst):
    return sorted(zip(src[row].tolist(), dst[col].tolist()))


@pytest.mark.parametrize("kind,fanout", [("homo", [-1, -1]), ("homo", [3, 2]),
                                         ("hetero", [-1, -1]), ("hetero", [2, 2])])
def test_sampler_output_equals_pygs_conversion(parts, kind, fanout):
    (data, stores), ctx = parts[0][kind], parts[1]
    hetero = kind == "hetero"
    seeds = NodeSamplerInput(None, torch.tensor([5, 70, 300, 1200]),
                             input_type="paper" if hetero else None)
    kw = dict(num_neighbors=fanout, current_ctx=ctx, seed=3)
    directional = DistNeighborSampler(stores, **kw).sample_from_nodes(seeds)
    want = directional.to_bidirectional()
    got = DistNeighborSampler(stores, subgraph_type="bidirectional",
                              **kw).sample_from_nodes(seeds)
    assert got.num_sampled_nodes is None and got.num_sampled_edges is None
    if not hetero:
        assert torch.equal(got.node, want.node)
        assert torch.equal(got.row, want.row) and torch.equal(got.col, want.col)
        node = directional.node  # the same draws (same seed): its edges' own ids
        own = dict(zip(zip(node[directional.row].tolist(), node[directional.col].tolist()),
                       directional.edge.tolist()))
        pairs = set(zip(got.node[got.row].tolist(), got.node[got.col].tolist()))
        for e, s, d in zip(got.edge.tolist(), got.node[got.row].tolist(),
                           got.node[got.col].tolist()):
            assert e == (own[(s, d)] if (s, d) in own else own[(d, s)]), (s, d)
            ends = (data.edge_index[0, e].item(), data.edge_index[1, e].item())
            assert ends in ((s, d), (d, s))  # original ids: the dataset's edge e
        assert all((d, s) in pairs for s, d in pairs)  # every edge also reversed
        return
    assert got.node.keys() == want.node.keys()
    for t in got.node:
        assert torch.equal(got.node[t], want.node[t])
    assert set(got.row) == set(want.row)
    for t in want.row:
        assert torch.equal(got.row[t], want.row[t]) and torch.equal(got.col[t], want.col[t])
        assert (got.edge[t] is None) == (want.edge[t] is None), t
        if want.edge[t] is not None:
            assert torch.equal(got.edge[t], want.edge[t])
    cites = ("paper", "cites", "paper")
    paper = got.node["paper"]
    pairs = set(_pairs(got.row[cites], got.col[cites], paper, paper))
    assert pairs and all((d, s) in pairs for s, d in pairs)


def test_loaders_build_bidirectional_batches(parts):
    (data, stores), ctx = parts[0]["homo"], parts[1]
    loader = DistNeighborLoader(stores, num_neighbors=[-1, -1], batch_size=8,
                                input_nodes=torch.arange(16), subgraph_type="bidirectional",
                                current_ctx=ctx)
    for batch in loader:
        pairs = set(zip(batch.n_id[batch.edge_index[0]].tolist(),
                        batch.n_id[batch.edge_index[1]].tolist()))
        assert pairs and all((d, s) in pairs for s, d in pairs)
        assert batch.e_id.numel() == batch.edge_index.size(1)
        assert torch.equal(batch.oid, batch.e_id)  # edge attributes follow the kept ids
        assert torch.equal(batch.nid, batch.n_id)
        assert "num_sampled_nodes" not in batch
    loader.close()
    data, stores = parts[0]["hetero"]
    loader = DistLinkNeighborLoader(
        stores, num_neighbors=[2, 2], batch_size=4, subgraph_type="bidirectional",
        edge_label_index=(("author", "writes", "paper"), data["author", "writes", "paper"]
                          .edge_index[:, :8]), current_ctx=ctx)
    for batch in loader:
        writes, by = batch["author", "writes", "paper"], batch["paper", "written_by", "author"]
        assert "e_id" not in writes and "e_id" not in by  # as PyG: no ids once merged
        fwd = set(zip(*writes.edge_index.tolist()))
        assert fwd == set(zip(*by.edge_index.flip(0).tolist()))
    loader.close()


def _induced_pairs(edge_index, src_ids, dst_ids):
    """Every edge of the graph between the given nodes, as original id pairs."""
    keep = torch.isin(edge_index[0], src_ids) & torch.isin(edge_index[1], dst_ids)
    return sorted(zip(edge_index[0, keep].tolist(), edge_index[1, keep].tolist()))


@pytest.mark.parametrize("kind,fanout", [("homo", [3, 2]), ("hetero", [2, 2])])
def test_induced_batches_hold_every_edge_between_their_nodes(parts, kind, fanout):
    (data, stores), ctx = parts[0][kind], parts[1]
    hetero = kind == "hetero"
    loader = DistNeighborLoader(stores, num_neighbors=fanout, batch_size=4,
                                input_nodes=("paper", torch.arange(8)) if hetero
                                else torch.arange(8), subgraph_type="induced",
                                current_ctx=ctx)
    for batch in loader:
        types = batch.edge_types if hetero else [None]
        for t in types:
            store, src, dst = (batch[t], batch[t[0]].n_id, batch[t[2]].n_id) if hetero \
                else (batch, batch.n_id, batch.n_id)
            ei = data[t].edge_index if hetero else data.edge_index
            got = sorted(zip(src[store.edge_index[0]].tolist(),
                             dst[store.edge_index[1]].tolist()))
            assert got == _induced_pairs(ei, src, dst), t
            assert torch.equal(ei[:, store.e_id], torch.stack([src[store.edge_index[0]],
                                                               dst[store.edge_index[1]]]))
            assert "num_sampled_edges" not in store
    loader.close()


@pytest.mark.parametrize("kwargs,match", [
    (dict(subgraph_type="bogus"), "'directional', 'bidirectional', 'induced'"),
    (dict(subgraph_type="induced", disjoint=True), "induced.*disjoint")])
def test_unsupported_subgraph_types_are_refused(parts, kwargs, match):
    (_, stores), ctx = parts[0]["homo"], parts[1]
    with pytest.raises(NotImplementedError, match=match):
        DistNeighborSampler(stores, num_neighbors=[2], current_ctx=ctx, **kwargs)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_sampler_workers_build_the_same_batches(parts):
    """The option reaches the sampler workers: their batches equal the trainer's own."""
    (_, stores), ctx = parts[0]["homo"], parts[1]

    def epoch(kind, workers):
        loader = DistNeighborLoader(stores, num_neighbors=[3, 2], batch_size=16, seed=5,
                                    input_nodes=torch.arange(48), subgraph_type=kind,
                                    num_workers=workers, current_ctx=ctx)
        out = [(b.n_id, b.edge_index, b.e_id) for b in loader]
        loader.close()
        return out

    for kind in ("bidirectional", "induced"):
        here, there = epoch(kind, 0), epoch(kind, 1)
        assert len(here) == len(there) == 3
        for a, b in zip(here, there):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), kind


def test_both_ways_of_ordering_the_pairs_agree():
    """The fast path (one sort of distinct integer keys) and the fallback for batches
    whose keys could overflow (a stable sort) keep the same pairs in the same order."""
    from pyg_dist.sampler._bidirectional import _union

    g = torch.Generator().manual_seed(0)
    row, col = torch.randint(0, 5, (40,), generator=g), torch.randint(0, 2, (40,), generator=g)
    fast = _union(row, col, row, col, num_src=5)
    slow = _union(row, col, row, col, num_src=2**60)  # keys * positions would overflow
    assert all(torch.equal(a, b) for a, b in zip(fast, slow))
    pairs = list(zip(fast[1].tolist(), fast[0].tolist()))
    assert pairs == sorted(set(pairs))  # by destination, then source; each pair once
    both = torch.cat([row, col]), torch.cat([col, row])
    for r, c, k in zip(*fast):  # the first position holding the pair
        hits = ((both[0] == r) & (both[1] == c)).nonzero().view(-1)
        assert k == hits.min()
