"""LABOR sampling on 1, 2 and 3 partitions equals the single-machine reference over the
unpartitioned graph (original ids), node for node and edge for edge, per seed in order;
through the sampler, and through the node loader with sampler workers and a resume."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest
import torch

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader,
                      DistNeighborSampler, LocalFeatureStore, LocalGraphStore, Partitioner)
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map
from pyg_dist.loader._producer import BatchTask
from pyg_dist.rpc import shutdown_rpc
from pyg_dist.sampler._direct import ENV as DIRECT_ENV
from pyg_dist.sampler._labor import batch_seed
from pyg_dist.sampler import labor_sample
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids, typed
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, edge_key

pytestmark = pytest.mark.multiprocess

FANOUT = [4, 3]
Triples = Dict[Tuple, Dict[int, List[Tuple[int, int]]]]  # (hop, edge type) -> dst -> picks


@pytest.fixture(scope="module")
def cora_labor(cora, tmp_path_factory):
    data, out = encode_ids(cora), {}
    for n in (1, 2, 3):
        out[n] = tmp_path_factory.mktemp(f"labor_cora{n}")
        Partitioner(data, n, out[n], seed=0, overwrite=True, progress=False).generate()
    return data, out


@pytest.fixture(scope="module")
def hetero_labor(hetero_graph, tmp_path_factory):
    data, out = encode_ids(hetero_graph), {}
    cites = data["paper", "cites", "paper"]
    cites.edge_weight = cites.edge_weight.clone()
    cites.edge_weight[::3] = 0.0  # never to be sampled
    for n in (2, 3):
        out[n] = tmp_path_factory.mktemp(f"labor_hetero{n}")
        Partitioner(data, n, out[n], seed=0, overwrite=True, progress=False).generate()
    return data, out


def _stores(root: str):
    ctx = DistContext.from_env(rpc_timeout=30)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    return ctx, (LocalFeatureStore.from_partition(root, pid),
                 LocalGraphStore.from_partition(root, pid))


def _sampler_job(root: str, seeds: List[Dict], kwargs: Dict) -> Tuple[list, list, int]:
    ctx, data = _stores(root)
    try:
        sampler = DistNeighborSampler(data, num_neighbors=FANOUT, current_ctx=ctx,
                                      sampling_strategy="labor", **kwargs)
        out = []
        for i, batch in enumerate(seeds[ctx.rank]):
            sub = sampler.group.loop.run(sampler.sample_subgraph(
                batch, rng=np.random.default_rng([i, ctx.rank])))
            out.append((sub.node, sub.row, sub.col, sub.original_edge, sub.num_sampled_edges))
        return out, sampler.direct.parts, sampler.direct.calls
    finally:
        shutdown_rpc()


def _reference_graphs(data, weight: str = None):
    num_nodes, edges = typed(data)
    graphs = {}
    for et, index in edges.items():
        order = torch.argsort(index[1], stable=True)
        colptr = torch.zeros(num_nodes[et[2]] + 1, dtype=torch.long)
        colptr[1:] = torch.bincount(index[1], minlength=num_nodes[et[2]]).cumsum(0)
        store = data[et] if "paper" in num_nodes else data
        w = getattr(store, weight)[order] if weight and hasattr(store, weight) else None
        graphs[et] = (colptr, index[0][order], w, order)
    return graphs


def _picks(hops) -> Triples:
    out: Triples = {}
    for h, drawn in enumerate(hops):
        for et, (dst, src, eid) in drawn.items():
            per = out.setdefault((h, et), {})
            for d, s, e in zip(dst.tolist(), src.tolist(), eid.tolist()):
                per.setdefault(d, []).append((s, e))
    return out


def _distributed_picks(result, node_maps) -> Triples:
    node, row, col, eid, counts = result
    hops: List[Dict] = [dict() for _ in FANOUT]
    for et, n in counts.items():
        ends = np.cumsum([0] + list(n))
        src = node_maps[et[0]][node[et[0]][row[et]]]
        dst = node_maps[et[2]][node[et[2]][col[et]]]
        for h in range(len(FANOUT)):
            part = slice(int(ends[h]), int(ends[h + 1]))
            if ends[h + 1] > ends[h]:
                hops[h][et] = (dst[part], src[part], eid[et][part])
    return _picks(hops)


def _node_maps(root: Path, hetero: bool):
    node_map = read_id_map(root)
    return node_map if hetero else {HOMO_NODE: node_map}


def _seeds(node_maps, node_type, world: int, per_rank: int, size: int):
    g = torch.Generator().manual_seed(5)
    inverse = torch.empty_like(node_maps[node_type])
    inverse[node_maps[node_type]] = torch.arange(inverse.numel())
    return [[{node_type: inverse[torch.randperm(inverse.numel(), generator=g)[:size]]}
             for _ in range(per_rank)] for _ in range(world)]


def _check(data, root, seeds, results, node_type, direct, weight=None, dependent=False):
    hetero = node_type != HOMO_NODE
    node_maps = _node_maps(root, hetero)
    graphs = _reference_graphs(data, weight)
    fanouts = {et: FANOUT for et in graphs}
    num_parts = io.read_meta(root).num_parts
    for rank, (out, parts, calls) in enumerate(results):
        others = [p for p in range(num_parts) if p != rank]
        assert (parts == others and (calls > 0 or not others)) if direct == "1" else \
            (parts == [] and calls == 0), (rank, parts, calls)
        for i, (batch, result) in enumerate(zip(seeds[rank], out)):
            orig = {t: node_maps[t][s] for t, s in batch.items()}
            ref = labor_sample(graphs, orig, fanouts,
                               batch_seed(np.random.default_rng([i, rank])), dependent)
            got = _distributed_picks(result, node_maps)
            assert got and got == _picks(ref.hops), (rank, i)
            for t, ids in result[0].items():  # the same nodes
                assert sorted(node_maps[t][ids].tolist()) == sorted(ref.node[t].tolist())


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_parts,direct,dependent", [(1, "1", False), (2, "0", False),
                                                        (2, "1", True), (3, "0", True),
                                                        (3, "1", False)])
def test_labor_equals_reference_cora(cora_labor, num_parts, direct, dependent):
    data, roots = cora_labor
    seeds = _seeds(_node_maps(roots[num_parts], False), HOMO_NODE, num_parts, 2, 64)
    results = run_ranks(_sampler_job, num_parts, str(roots[num_parts]), seeds,
                        {"layer_dependency": dependent, "seed": 3}, timeout=200,
                        extra_env={DIRECT_ENV: direct})
    _check(data, roots[num_parts], seeds, results, HOMO_NODE, direct, dependent=dependent)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_parts,direct", [(2, "0"), (3, "1")])
def test_labor_equals_reference_hetero_weighted(hetero_labor, num_parts, direct):
    data, roots = hetero_labor
    seeds = _seeds(_node_maps(roots[num_parts], True), "paper", num_parts, 2, 40)
    results = run_ranks(_sampler_job, num_parts, str(roots[num_parts]), seeds,
                        {"weight_attr": "edge_weight"}, timeout=200,
                        extra_env={DIRECT_ENV: direct})
    _check(data, roots[num_parts], seeds, results, "paper", direct, weight="edge_weight")
    cites = ("paper", "cites", "paper")
    assert any(cites in r[3] and r[3][cites].numel() for out, _, _ in results for r in out)


# ---- the loader: workers and an exact resume give the reference's batches -------------
def _loader_job(root: str, num_workers: int) -> List[Tuple]:
    ctx, data = _stores(root)
    try:
        ids = torch.arange(ctx.rank, 2708, 2)[:160]
        kwargs = dict(num_neighbors=FANOUT, input_nodes=ids, batch_size=40, shuffle=True,
                      current_ctx=ctx, seed=11, sampling_strategy="labor",
                      num_workers=num_workers)
        loader = DistNeighborLoader(data, **kwargs)
        it = iter(loader)
        out = [_summary(next(it)) for _ in range(2)]
        state = loader.state_dict()
        loader.close()
        resumed = DistNeighborLoader(data, **kwargs)
        resumed.load_state_dict(state)
        out += [_summary(b) for b in resumed]
        resumed.close()
        links = DistLinkNeighborLoader(data, num_neighbors=FANOUT, batch_size=32,
                                       edge_label_index=_rank_edges(ctx.rank), current_ctx=ctx,
                                       sampling_strategy="labor", neg_sampling="binary",
                                       num_workers=num_workers)
        out.append(_summary(next(iter(links))))
        links.close()
        return out
    finally:
        shutdown_rpc()


def _rank_edges(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(rank)
    return torch.randint(0, 2708, (2, 64), generator=g)


def _summary(batch) -> Tuple:
    n_id = batch.n_id
    return (n_id[:getattr(batch, "batch_size", 0)], n_id[batch.edge_index[0]], n_id[batch.edge_index[1]],
            batch.e_id, batch.n_id)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_labor_loader_batches_equal_reference(cora_labor, num_workers):
    data, roots = cora_labor
    results = run_ranks(_loader_job, 2, str(roots[2]), num_workers, timeout=260)
    graphs = _reference_graphs(data)
    for rank, batches in enumerate(results):
        assert len(batches) == 5
        _, src, dst, eid, _ = batches.pop()  # the link batch: real edges
        assert eid.numel() and bool((data.edge_index[:, eid] == torch.stack([src, dst])).all())
        for i, (seeds, src, dst, eid, n_id) in enumerate(batches):
            rng = BatchTask(None, (11, 0, i, rank)).rng()
            ref = labor_sample(graphs, {HOMO_NODE: seeds}, {HOMO_EDGE: FANOUT},
                               batch_seed(rng))
            want = {(int(d), int(s), int(e)) for h in ref.hops
                    for d, s, e in zip(*h[HOMO_EDGE])}
            assert set(zip(dst.tolist(), src.tolist(), eid.tolist())) == want, (rank, i)
            assert sorted(n_id.tolist()) == sorted(ref.node[HOMO_NODE].tolist())
            assert bool((data.edge_index[:, eid] == torch.stack([src, dst])).all())
