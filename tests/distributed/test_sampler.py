"""DistNeighborSampler on 1, 2 and 3 partitions against the unpartitioned graph.

Each job partitions an id-encoded graph (``nid``/``oid`` attributes), runs one
process per partition, and returns what every rank sampled and fetched; the
parent compares it with ground truth computed on the original graph.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.partition import io
from pyg_dist.rpc import RpcPeerError, shutdown_rpc
from pyg_dist.testing import RanksFailed, run_ranks
from pyg_dist.testing.graphs import encode_ids, khop_in_neighbourhood, typed
from pyg_dist.typing import HOMO_EDGE, HOMO_NODE, edge_key

HOPS = 2


def _stores(root: str):
    ctx = DistContext.from_env(rpc_timeout=20)
    meta = io.read_meta(Path(root))
    pid = ctx.partition_id(meta.num_parts)
    return ctx, (LocalFeatureStore.from_partition(root, pid),
                 LocalGraphStore.from_partition(root, pid))


def _run(sampler: DistNeighborSampler, seeds: Dict, seed_time=None, fetch: bool = True):
    sub = sampler.group.loop.run(sampler.sample_subgraph(seeds, seed_time))
    feats = sampler.group.loop.run(sampler.fetcher.fetch(sub.node, sub.edge)) if fetch else None
    return {"node": sub.node, "row": sub.row, "col": sub.col, "edge": sub.edge,
            "batch": sub.batch, "num_nodes": sub.num_sampled_nodes,
            "num_edges": sub.num_sampled_edges,
            "feats": (feats.nodes, feats.edges) if fetch else None}


def _sampling_job(root: str, seeds_per_rank: List[Dict], fanouts: List[int],
                  kwargs: Dict) -> List[dict]:
    ctx, data = _stores(root)
    try:
        out = []
        sampler = DistNeighborSampler(data, num_neighbors=fanouts, current_ctx=ctx, seed=ctx.rank,
                                      **kwargs)
        for seeds in seeds_per_rank[ctx.rank]:
            out.append(_run(sampler, seeds))
        return out
    finally:
        shutdown_rpc()


# ---- fixtures: partitioned graphs ---------------------------------------------------
@pytest.fixture(scope="module")
def cora_parts(cora, tmp_path_factory):
    data = encode_ids(cora)
    out = {}
    for n in (1, 2, 3):
        root = tmp_path_factory.mktemp(f"cora{n}")
        Partitioner(data, n, root, seed=0, overwrite=True, progress=False).generate()
        out[n] = root
    return data, out


@pytest.fixture(scope="module")
def hetero_parts(hetero_graph, tmp_path_factory):
    data = encode_ids(hetero_graph)
    cites = data["paper", "cites", "paper"]
    cites.edge_weight = cites.edge_weight.clone()
    cites.edge_weight[::3] = 0.0  # never to be sampled
    out = {}
    for n in (2, 3):
        root = tmp_path_factory.mktemp(f"hetero{n}")
        Partitioner(data, n, root, seed=0, overwrite=True, progress=False).generate()
        out[n] = root
    return data, out


def _maps(root: Path, is_hetero: bool):
    node_map = io.load_pt(root / io.NODE_MAP_FILE)
    edge_map = io.load_pt(root / io.EDGE_MAP_FILE)
    if not is_hetero:
        return {HOMO_NODE: node_map}, {HOMO_EDGE: edge_map}
    meta = io.read_meta(root)
    return node_map, {t: edge_map[edge_key(t)] for t in meta.edge_types}


def _new_ids(node_map: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    inverse = torch.empty_like(node_map)
    inverse[node_map] = torch.arange(node_map.numel())
    return inverse[old]


def _seed_sets(node_map: Dict, node_type, world: int, per_rank: int, size: int):
    g = torch.Generator().manual_seed(7)
    n = node_map[node_type].numel()
    return [[{node_type: _new_ids(node_map[node_type], torch.randperm(n, generator=g)[:size])}
             for _ in range(per_rank)] for _ in range(world)]


# ---- full fan-out == k-hop in-neighbourhood ------------------------------------------
def _check_full(data, root: Path, seeds_per_rank, results) -> None:
    num_nodes, edges = typed(data)
    node_map, edge_map = _maps(root, "paper" in num_nodes)
    edge_types = list(edges)
    for rank_seeds, rank_out in zip(seeds_per_rank, results):
        for seeds, out in zip(rank_seeds, rank_out):
            orig = {t: node_map[t][s] for t, s in seeds.items()}
            want_nodes, want_edges = khop_in_neighbourhood(num_nodes, edges, orig, HOPS,
                                                           edge_types)
            fnodes, fedges = out["feats"]
            for t, ids in out["node"].items():
                got = node_map[t][ids]
                assert set(got.tolist()) == want_nodes[t] and got.numel() == len(want_nodes[t])
                assert torch.equal(fnodes[t]["nid"], got)  # features belong to the node
                assert torch.equal(got[:seeds.get(t, ids[:0]).numel()], orig.get(t, got[:0]))
                x = data[t].x if "paper" in num_nodes else data.x
                assert torch.equal(fnodes[t]["x"], x[got])
            for et in edge_types:
                eid = out["edge"][et]
                oid = edge_map[et][eid]
                assert set(oid.tolist()) == want_edges[et] and oid.numel() == len(want_edges[et])
                assert torch.equal(fedges[et]["oid"], oid)
                src = node_map[et[0]][out["node"][et[0]][out["row"][et]]]
                dst = node_map[et[2]][out["node"][et[2]][out["col"][et]]]
                assert torch.equal(torch.stack([src, dst]), edges[et][:, oid])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts", [1, 2, 3])
def test_full_fanout_is_khop_neighbourhood_cora(cora_parts, num_parts):
    data, roots = cora_parts
    node_map, _ = _maps(roots[num_parts], False)
    seeds = _seed_sets(node_map, HOMO_NODE, num_parts, 2, 25)
    results = run_ranks(_sampling_job, num_parts, str(roots[num_parts]), seeds, [-1] * HOPS,
                        {}, timeout=150)
    _check_full(data, roots[num_parts], seeds, results)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts", [2, 3])
def test_full_fanout_is_khop_neighbourhood_hetero(hetero_parts, num_parts):
    data, roots = hetero_parts
    node_map, _ = _maps(roots[num_parts], True)
    seeds = _seed_sets(node_map, "paper", num_parts, 2, 10)
    results = run_ranks(_sampling_job, num_parts, str(roots[num_parts]), seeds, [-1] * HOPS,
                        {}, timeout=150)
    _check_full(data, roots[num_parts], seeds, results)
