"""DistNeighborLoader / DistLinkNeighborLoader in real multi-process jobs.

Every batch is checked inside the rank that produced it against the original
graph (id-encoded attributes ``nid``/``oid`` say which original node or edge a
fetched row belongs to). Every batch also runs an ``all_reduce`` like DDP's
backward, so a rank yielding fewer batches than its peers would hang the job
(bounded by the test timeout) instead of passing.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.distributed as dist

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader, LocalFeatureStore,
                      LocalGraphStore, Partitioner, edge_split, node_split, shutdown_rpc)
from pyg_dist.format import _partition_io as io
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids
from pyg_dist.format import read_id_map

pytestmark = pytest.mark.multiprocess  # every test here starts processes


def _open(root: str, init_pg: bool = True):
    ctx = DistContext.from_env(rpc_timeout=30)
    if init_pg:  # user code owns the DDP process group
        dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    return ctx, (LocalFeatureStore.from_partition(root, pid),
                 LocalGraphStore.from_partition(root, pid))


def _check_node_batch(batch, edge_index: torch.Tensor, y: torch.Tensor, seeds: torch.Tensor,
                      node_map: torch.Tensor, edge_map: torch.Tensor) -> None:
    assert torch.equal(batch.n_id[:batch.batch_size], seeds)  # seeds first
    assert torch.equal(batch.nid, batch.n_id)                # n_id: original ids
    assert torch.equal(batch.n_id, node_map[batch.part_n_id])  # part_n_id: relabelled
    assert torch.equal(batch.y, y[batch.nid])
    assert torch.equal(batch.oid, batch.e_id)                # e_id: original ids
    assert torch.equal(batch.e_id, edge_map[batch.part_e_id])
    ends = torch.stack([batch.nid[batch.edge_index[0]], batch.nid[batch.edge_index[1]]])
    assert torch.equal(ends, edge_index[:, batch.oid])       # every edge is a real edge
    assert batch.edge_index.size(1) == batch.e_id.numel() == batch.e_id.unique().numel()


def _ddp_step(ctx: DistContext) -> None:
    if ctx.world_size > 1:
        dist.all_reduce(torch.ones(1))


def _node_job(root: str, edge_index, y, num_workers: int) -> Dict:
    ctx, data = _open(root)
    node_map = read_id_map(Path(root))
    edge_map = read_id_map(Path(root), "edge")
    ids = node_split(data, "train", ctx)
    if ctx.rank == 1:
        ids = ids[:5]  # uneven seeds: rank 1 has one batch, rank 0 several
    loader = DistNeighborLoader(data=data, num_neighbors=[10, 5], input_nodes=ids,
                                batch_size=16, shuffle=False, num_workers=num_workers,
                                current_ctx=ctx)
    counts = []
    for i, batch in enumerate(loader):  # epoch 0: in order, padded on the smaller rank
        j = i % math.ceil(ids.numel() / 16)  # a rank with fewer batches repeats its own
        seeds = ids[16 * j:16 * (j + 1)]
        _check_node_batch(batch, edge_index, y, seeds, node_map, edge_map)
        _ddp_step(ctx)
        counts.append(batch.batch_size)
    for i, batch in enumerate(loader):  # epoch 1: leave early
        _ddp_step(ctx)
        if i == 1:
            break
    epoch2 = 0
    for batch in loader:  # epoch 2: a full epoch after an early break
        _ddp_step(ctx)
        epoch2 += 1
    loader.close()
    shutdown_rpc()
    return {"len": len(loader), "counts": counts, "epoch2": epoch2, "seeds": ids.numel()}


@pytest.fixture(scope="module")
def cora2(cora, tmp_path_factory):
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora2")
    Partitioner(data, 2, root, seed=0, progress=False).generate()
    return data, root


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_node_loader_two_ranks_uneven_seeds(cora2, num_workers):
    data, root = cora2
    out = run_ranks(_node_job, 2, str(root), data.edge_index, data.y, num_workers,
                    timeout=200)
    want = math.ceil(out[0]["seeds"] / 16)
    assert out[0]["seeds"] > 16 * 3 and out[1]["seeds"] == 5
    for rank in range(2):
        assert out[rank]["len"] == want == len(out[rank]["counts"]) == out[rank]["epoch2"]
    assert sum(out[0]["counts"]) == out[0]["seeds"]
    assert out[1]["counts"] == [5] * want  # rank 1 repeats its one batch


def _link_job(root: str, edge_index) -> Dict:
    ctx, data = _open(root)
    node_map = read_id_map(Path(root))
    existing = set(map(tuple, edge_index.t().tolist()))
    seeds = edge_split(data, ctx)
    loader = DistLinkNeighborLoader(data=data, num_neighbors=[5, 5], edge_label_index=seeds,
                                    neg_sampling="binary", batch_size=64, shuffle=True,
                                    current_ctx=ctx)
    pos = neg = neg_edges = 0
    for batch in loader:
        _ddp_step(ctx)
        ends = batch.n_id[batch.edge_label_index]
        assert torch.equal(batch.nid, batch.n_id)
        assert torch.equal(batch.n_id, node_map[batch.part_n_id])
        for (s, d), label in zip(ends.t().tolist(), batch.edge_label.tolist()):
            if label == 1:
                assert (s, d) in existing
                pos += 1
            else:
                neg += 1
                neg_edges += (s, d) in existing
    loader.close()
    shutdown_rpc()
    return {"pos": pos, "neg": neg, "neg_edges": neg_edges, "seeds": seeds.size(1)}


@pytest.mark.timeout(200)
def test_link_loader_positives_are_edges_negatives_are_not(cora2):
    data, root = cora2
    out = run_ranks(_link_job, 2, str(root), data.edge_index, timeout=160)
    assert sum(o["seeds"] for o in out) == data.edge_index.size(1)
    for o in out:
        assert o["pos"] >= o["seeds"] and o["neg"] == o["pos"]  # padding may repeat seeds
        assert o["neg_edges"] == 0


def _hetero_job(root: str, hetero) -> Dict:
    ctx, data = _open(root, init_pg=False)  # the loader initialises the process group
    node_map = read_id_map(Path(root))
    ids = node_split(data, "train", ctx, node_type="paper", force_even=True)
    loader = DistNeighborLoader(data=data, num_neighbors=[4, 3], input_nodes=("paper", ids),
                                batch_size=32, current_ctx=ctx)
    batches = 0
    for batch in loader:
        _ddp_step(ctx)
        batches += 1
        assert torch.equal(batch["paper"].n_id[:batch["paper"].batch_size],
                           ids[32 * (batches - 1):32 * batches])
        for t in batch.node_types:
            assert torch.equal(batch[t].nid, batch[t].n_id)
            assert torch.equal(batch[t].n_id, node_map[t][batch[t].part_n_id])
            assert torch.equal(batch[t].x, hetero[t].x[batch[t].nid])
        for et in batch.edge_types:
            src = batch[et[0]].nid[batch[et].edge_index[0]]
            dst = batch[et[2]].nid[batch[et].edge_index[1]]
            assert torch.equal(torch.stack([src, dst]), hetero[et].edge_index[:, batch[et].oid])
    loader.close()
    shutdown_rpc()
    return {"batches": batches, "len": len(loader), "seeds": ids.numel()}


@pytest.mark.timeout(200)
def test_hetero_node_loader_three_ranks(hetero_graph, tmp_path):
    data = encode_ids(hetero_graph)
    Partitioner(data, 3, tmp_path, seed=0, progress=False, overwrite=True).generate()
    out = run_ranks(_hetero_job, 3, str(tmp_path), data, timeout=160)
    counts = [o["seeds"] for o in out]
    assert sum(counts) == int(data["paper"].train_mask.sum()) and max(counts) - min(counts) <= 1
    assert all(o["batches"] == o["len"] == out[0]["len"] for o in out)


def _truth_job(root: str, seeds: Dict, fanout: int) -> Dict:
    """Full fan-out batches of the given original seeds: what every batch held."""
    ctx, data = _open(root, init_pg=False)
    node_type, ids = seeds["type"], seeds["ids"][ctx.rank]
    loader = DistNeighborLoader(data=data, num_neighbors=[fanout] * 2,
                                input_nodes=(node_type, ids) if node_type else ids,
                                batch_size=ids.numel(), current_ctx=ctx)
    batch = next(iter(loader))
    hetero = node_type is not None
    stores = {t: batch[t] for t in batch.node_types} if hetero else {None: batch}
    edges = {t: batch[t] for t in batch.edge_types} if hetero else {None: batch}
    out = {"n_id": {t: s.n_id for t, s in stores.items()},
           "nid": {t: s.nid for t, s in stores.items()},
           "e_id": {t: s.e_id for t, s in edges.items()},
           "oid": {t: s.oid for t, s in edges.items()},
           "direct": loader.sampler.direct.parts}
    loader.close()
    for kind in ("bidirectional", "induced"):
        loader = DistNeighborLoader(data=data, num_neighbors=[fanout] * 2,
                                    input_nodes=(node_type, ids) if node_type else ids,
                                    batch_size=ids.numel(), current_ctx=ctx,
                                    subgraph_type=kind)
        batch = next(iter(loader))
        ends = {t: (batch[t[0]].n_id, batch[t[2]].n_id) for t in batch.edge_types} \
            if hetero else {None: (batch.n_id, batch.n_id)}
        edges = {t: batch[t] for t in batch.edge_types} if hetero else {None: batch}
        out[kind] = {t: list(zip(ends[t][0][s.edge_index[0]].tolist(),
                                 ends[t][1][s.edge_index[1]].tolist()))
                     for t, s in edges.items()}
        out[f"{kind}_e_id"] = {t: s.e_id if "e_id" in s else None for t, s in edges.items()}
        loader.close()
    out["repeat"] = _repeated_seed(data, ctx, node_type, ids, fanout)
    shutdown_rpc()
    return out


def _repeated_seed(data, ctx, node_type, ids: torch.Tensor, fanout: int) -> Dict:
    """The seeds again with the first one repeated last (kept in its place, as PyG
    does): the seed block, and the in-edges (original edge ids) of both occurrences."""
    seeds = torch.cat([ids, ids[:1]])
    loader = DistNeighborLoader(data=data, num_neighbors=[fanout] * 2, batch_size=seeds.numel(),
                                input_nodes=(node_type, seeds) if node_type else seeds,
                                current_ctx=ctx)
    batch = next(iter(loader))
    loader.close()
    store = batch[node_type] if node_type else batch
    into = {}
    for t in (batch.edge_types if node_type else [None]):
        s = batch[t] if t else batch
        if t is None or t[2] == node_type:
            dst = s.edge_index[1]
            into[t] = (sorted(s.e_id[dst == 0].tolist()),
                       sorted(s.e_id[dst == seeds.numel() - 1].tolist()))
    return {"seeds": seeds, "n_id": store.n_id[:store.batch_size], "into": into}


def _truth(data, parts: int, direct: str, tmp_path) -> None:
    from pyg_dist.testing import khop_in_neighbourhood, typed
    from pyg_dist._typing import HOMO_EDGE, HOMO_NODE

    Partitioner(data, parts, tmp_path, seed=0, progress=False, overwrite=True).generate()
    num_nodes, edges = typed(data)
    hetero = HOMO_NODE not in num_nodes
    node_type = "paper" if hetero else None
    gen = torch.Generator().manual_seed(parts)
    total = num_nodes["paper" if hetero else HOMO_NODE]
    ids = [torch.randperm(total, generator=gen)[:6] for _ in range(parts)]  # any owner
    out = run_ranks(_truth_job, parts, str(tmp_path), {"type": node_type, "ids": ids}, -1,
                    timeout=280, extra_env={"PYG_DIST_DIRECT_READS": direct})
    for rank, got in enumerate(out):
        assert bool(got["direct"]) == (direct == "1")
        seed_type = node_type or HOMO_NODE
        nodes, taken = khop_in_neighbourhood(num_nodes, edges, {seed_type: ids[rank]}, 2,
                                             list(edges))
        for t, n_id in got["n_id"].items():
            key = t or HOMO_NODE
            assert torch.equal(n_id, got["nid"][t])  # original ids, rows of those nodes
            assert set(n_id.tolist()) == nodes[key], (rank, key)
        for t, e_id in got["e_id"].items():
            key = t or HOMO_EDGE
            assert torch.equal(e_id, got["oid"][t])
            assert set(e_id.tolist()) == taken[key], (rank, key)
        _check_bidirectional(got, edges, taken, rank)
        _check_induced(got, edges, nodes, rank)
        repeat = got["repeat"]
        assert torch.equal(repeat["n_id"], repeat["seeds"]), rank
        assert all(first == last for first, last in repeat["into"].values()), rank


def _check_bidirectional(got: dict, edges: dict, taken: dict, rank: int) -> None:
    """subgraph_type="bidirectional" on the same seeds: PyG's conversion of the ground
    truth (every sampled edge also reversed; a hetero type also gets its reverse type's
    edges transposed, and loses its edge ids)."""
    from pyg_dist._typing import HOMO_EDGE

    def pairs(t):
        return {(edges[t][0, e].item(), edges[t][1, e].item()) for e in taken[t]}

    for t, bi in got["bidirectional"].items():
        key = t or HOMO_EDGE
        if t is None or key[0] == key[2]:
            reverse = key
        else:  # this graph's types from dst to src: one each
            (reverse,) = [r for r in edges if (r[0], r[2]) == (key[2], key[0])]
        want = pairs(key) | {(d, s) for s, d in pairs(reverse)}
        assert set(bi) == want and len(bi) == len(want), (rank, key)  # each pair once
        e_id = got["bidirectional_e_id"][t]
        assert (e_id is None) == (t is not None), (rank, key)
        if e_id is not None:  # homogeneous: each pair keeps the id of one of its edges
            for (s, d), e in zip(bi, e_id.tolist()):
                assert (edges[key][0, e].item(), edges[key][1, e].item()) in ((s, d), (d, s))


@pytest.mark.timeout(400)
@pytest.mark.parametrize("parts,direct", [(2, "1"), (3, "0")])
def test_homo_batches_hold_ground_truth_original_ids(cora, parts, direct, tmp_path):
    _truth(encode_ids(cora), parts, direct, tmp_path)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("parts,direct", [(2, "0"), (3, "1")])
def test_hetero_batches_hold_ground_truth_original_ids(hetero_graph, parts, direct, tmp_path):
    _truth(encode_ids(hetero_graph), parts, direct, tmp_path)


def _check_induced(got: dict, edges: dict, nodes: dict, rank: int) -> None:
    """subgraph_type="induced" on the same seeds: every edge of the unpartitioned graph
    between the sampled nodes, once, each with its own original id."""
    from pyg_dist._typing import HOMO_EDGE, HOMO_NODE

    for t, pairs in got["induced"].items():
        key = t or HOMO_EDGE
        src = nodes[key[0] if t else HOMO_NODE]
        dst = nodes[key[2] if t else HOMO_NODE]
        ei = edges[key]
        want = [(s, d) for s, d in zip(ei[0].tolist(), ei[1].tolist()) if s in src and d in dst]
        assert sorted(pairs) == sorted(want), (rank, key)
        for (s, d), e in zip(pairs, got["induced_e_id"][t].tolist()):
            assert (ei[0, e].item(), ei[1, e].item()) == (s, d), (rank, key)
