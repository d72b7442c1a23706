"""DistNeighborSampler on 1, 2 and 3 partitions against the unpartitioned graph.

Each job partitions an id-encoded graph (``nid``/``oid`` attributes), runs one
process per partition, and returns what every rank sampled and fetched; the
parent compares it with ground truth computed on the original graph.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.format import _partition_io as io
from pyg_dist.rpc import RpcPeerError, shutdown_rpc
from pyg_dist.sampler._direct import ENV as DIRECT_ENV
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids, khop_in_neighbourhood, typed
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, edge_key
from pyg_dist.format import read_id_map

pytestmark = pytest.mark.multiprocess  # every test here starts processes

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
                  kwargs: Dict) -> Tuple[List[dict], List[int], int]:
    """Samples and fetches; also returns the partitions read directly (same machine,
    mapped files) and how many calls went that way instead of over RPC."""
    ctx, data = _stores(root)
    try:
        out = []
        sampler = DistNeighborSampler(data, num_neighbors=fanouts, current_ctx=ctx, seed=ctx.rank,
                                      **kwargs)
        for seeds in seeds_per_rank[ctx.rank]:
            out.append(_run(sampler, seeds))
        return out, sampler.direct.parts, sampler.direct.calls
    finally:
        shutdown_rpc()


def _check_direct(results: list, num_parts: int, direct: str) -> List[List[dict]]:
    """Direct reads were used exactly when allowed (so both paths are really tested);
    returns the sampled outputs."""
    for rank, (_, parts, calls) in enumerate(results):
        pid = rank * num_parts // len(results)
        others = [p for p in range(num_parts) if p != pid]
        if direct == "1":
            assert parts == others and (calls > 0 or not others), (rank, parts, calls)
        else:
            assert parts == [] and calls == 0, (rank, parts, calls)
    return [r[0] for r in results]


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
    node_map = read_id_map(root)
    edge_map = read_id_map(root, "edge")
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


# direct: "1" reads same-machine partitions from their mapped files, "0" over RPC
@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts,world,direct", [(1, 1, "1"), (2, 2, "0"), (2, 2, "1"),
                                                    (3, 3, "0"), (3, 3, "1"), (2, 4, "1")])
def test_full_fanout_is_khop_neighbourhood_cora(cora_parts, num_parts, world, direct):
    """``world > num_parts``: several trainers share a partition (requests spread)."""
    data, roots = cora_parts
    node_map, _ = _maps(roots[num_parts], False)
    seeds = _seed_sets(node_map, HOMO_NODE, world, 2, 25)
    results = run_ranks(_sampling_job, world, str(roots[num_parts]), seeds, [-1] * HOPS,
                        {}, timeout=150, extra_env={DIRECT_ENV: direct})
    _check_full(data, roots[num_parts], seeds, _check_direct(results, num_parts, direct))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts,direct", [(2, "0"), (2, "1"), (3, "1")])
def test_full_fanout_is_khop_neighbourhood_hetero(hetero_parts, num_parts, direct):
    data, roots = hetero_parts
    node_map, _ = _maps(roots[num_parts], True)
    seeds = _seed_sets(node_map, "paper", num_parts, 2, 10)
    results = run_ranks(_sampling_job, num_parts, str(roots[num_parts]), seeds, [-1] * HOPS,
                        {}, timeout=150, extra_env={DIRECT_ENV: direct})
    _check_full(data, roots[num_parts], seeds, _check_direct(results, num_parts, direct))


# ---- fan-out k: real edges, min(k, degree) per node, no duplicates, fair draws ---------
FANOUT = [5, 3]


def _fanout_job(root: str, seeds_per_rank, hub: int, draws: int) -> Dict:
    ctx, data = _stores(root)
    try:
        sampler = DistNeighborSampler(data, num_neighbors=FANOUT, current_ctx=ctx, seed=ctx.rank)
        out = {"runs": [_run(sampler, s, fetch=False) for s in seeds_per_rank[ctx.rank]]}
        if ctx.rank == 0:  # a hub owned by another partition, drawn many times
            one = DistNeighborSampler(data, num_neighbors=[3], current_ctx=ctx, seed=11)
            out["hub"] = torch.cat([one.group.loop.run(one.sample_subgraph(
                {HOMO_NODE: torch.tensor([hub])})).edge[HOMO_EDGE] for _ in range(draws)])
        return out
    finally:
        shutdown_rpc()


@pytest.mark.timeout(180)
def test_fanout_k_three_partitions(cora_parts):
    data, roots = cora_parts
    root = roots[3]
    node_maps, edge_maps = _maps(root, False)
    node_map, edge_map = node_maps[HOMO_NODE], edge_maps[HOMO_EDGE]
    deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    meta = io.read_meta(root)
    book = meta.node_book(HOMO_NODE)
    new_deg = deg[node_map]
    remote = torch.arange(book.start(2), book.start(2) + book.size(2))
    hub = int(remote[new_deg[remote].argmax()])
    seeds = _seed_sets(node_maps, HOMO_NODE, 3, 2, 40)
    draws = 300
    results = run_ranks(_fanout_job, 3, str(root), seeds, hub, draws, timeout=150)
    for rank_out in results:
        for out in rank_out["runs"]:
            ids, row, col, eid = (out["node"][HOMO_NODE], out["row"][HOMO_EDGE],
                                  out["col"][HOMO_EDGE], out["edge"][HOMO_EDGE])
            oid = edge_map[eid]
            assert eid.unique().numel() == eid.numel()  # no duplicates without replacement
            ends = torch.stack([node_map[ids[row]], node_map[ids[col]]])
            assert torch.equal(ends, data.edge_index[:, oid])  # every sampled edge is real
            layers = torch.tensor(out["num_nodes"][HOMO_NODE]).cumsum(0).tolist()
            edge_ends = torch.tensor(out["num_edges"][HOMO_EDGE]).cumsum(0).tolist()
            lo = 0
            for h, k in enumerate(FANOUT):  # nodes of layer h get min(k, deg) in-edges
                cols = col[lo:edge_ends[h]]
                first, last = (layers[h - 1] if h else 0), layers[h]
                got = torch.bincount(cols - first, minlength=last - first)
                assert torch.equal(got, new_deg[ids[first:last]].clamp(max=k))
                lo = edge_ends[h]
    hub_edges = results[0]["hub"]
    d = int(new_deg[hub])
    freq = torch.bincount(hub_edges - int(hub_edges.min()), minlength=d).float() / draws
    assert hub_edges.numel() == 3 * draws and hub_edges.unique().numel() == d
    assert float((freq - 3 / d).abs().max()) < 0.1  # p=3/d (d>=30): ~6 std of slack


# ---- temporal and weighted sampling on a heterogeneous graph ---------------------------
def _hetero_props_job(root: str, seeds: torch.Tensor, seed_time: torch.Tensor) -> Dict:
    ctx, data = _stores(root)
    try:
        out = {}
        node_t = DistNeighborSampler(data, num_neighbors=[4, 4], current_ctx=ctx,
                                     time_attr="time", seed=1)
        out["node_time"] = _run(node_t, {"paper": seeds})
        edge_t = DistNeighborSampler(data, num_neighbors=[4, 4], current_ctx=ctx,
                                     time_attr="edge_time", temporal_strategy="last", seed=2)
        out["edge_time"] = _run(edge_t, {"paper": seeds}, {"paper": seed_time})
        weighted = DistNeighborSampler(data, num_neighbors=[5, 5], current_ctx=ctx,
                                       weight_attr="edge_weight", seed=3)
        out["weighted"] = _run(weighted, {"paper": seeds}, fetch=False)
        return out
    finally:
        shutdown_rpc()


@pytest.mark.timeout(180)
def test_temporal_and_weighted_hetero(hetero_parts):
    data, roots = hetero_parts
    root = roots[2]
    node_map, edge_map = _maps(root, True)
    seeds = _seed_sets(node_map, "paper", 2, 1, 40)
    seed_time = torch.full((40,), 2012)
    per_rank = [s[0]["paper"] for s in seeds]
    results = [run_ranks(_hetero_props_job, 2, str(root), per_rank[0], seed_time, timeout=150)]
    cites = ("paper", "cites", "paper")
    year = data["paper"].time
    for out in results[0]:
        node_out = out["node_time"]  # no sampled paper is newer than its subtree's seed
        papers, batch = node_out["node"]["paper"], node_out["batch"]["paper"]
        own_time = year[node_map["paper"][per_rank[0]]]
        assert bool((year[node_map["paper"][papers]] <= own_time[batch]).all())
        assert node_out["edge"][cites].numel() > 0
        edge_out = out["edge_time"]  # no sampled edge is newer than the seed time
        for et in (cites, ("author", "writes", "paper")):
            oid = edge_map[et][edge_out["edge"][et]]
            assert oid.numel() > 0 and bool((data[et].edge_time[oid] <= 2012).all())
        weighted = out["weighted"]  # zero-weight edges never appear
        oid = edge_map[cites][weighted["edge"][cites]]
        assert oid.numel() > 0 and bool((data[cites].edge_weight[oid] > 0).all())


def _cold_start_job(root: str) -> Dict[str, float]:
    """First calls of every sampling mode, each to the *other* partition, with a short
    timeout (rank 1's numba cache empty): no peer may still be compiling when asked.
    Joining may wait for a compiling peer (rank 0 waits for rank 1 to compile before it
    joins); the calls after it may not."""
    import time

    ctx = DistContext.from_env(rpc_timeout=150)  # joining waits for rank 1 to compile cold
    meta = io.read_meta(Path(root))
    data = (LocalFeatureStore.from_partition(root, ctx.rank),
            LocalGraphStore.from_partition(root, ctx.rank))
    book = meta.node_book("paper")
    other = 1 - ctx.rank
    seeds = torch.arange(book.start(other), book.start(other) + 16)
    took = {}
    try:
        for name, kwargs in (("temporal", dict(time_attr="edge_time",
                                               temporal_strategy="last")),
                             ("weighted", dict(weight_attr="edge_weight", replace=True)),
                             ("uniform", dict(replace=False))):
            sampler = DistNeighborSampler(data, num_neighbors=[4, 4], current_ctx=ctx, seed=1,
                                          **kwargs)
            sampler.group.ctx = ctx.with_timeout(COLD_TIMEOUT_S)  # every call from here on
            start = time.monotonic()
            _run(sampler, {"paper": seeds},
                 {"paper": torch.full((16,), 2015)} if name == "temporal" else None)
            took[name] = time.monotonic() - start
        return took
    finally:
        shutdown_rpc()


COLD_TIMEOUT_S = 6


@pytest.mark.serial  # compile times against a timeout
@pytest.mark.timeout(240)
def test_a_cold_numba_cache_never_trips_a_timeout(hetero_parts, tmp_path, monkeypatch):
    """Before kernels were compiled ahead of joining RPC, a peer compiling on its first
    call made the caller time out (seen under load with a 20 s timeout)."""
    _, roots = hetero_parts
    # rank 1 starts cold: an empty cache (read at numba's import, so in a fresh
    # interpreter: the fork server imported numba before); rank 0, forked from the warm
    # server (its kernels loaded: only rank 1's fresh start is under test), samples
    # partition 1's seeds first, so it waits on rank 1 wherever rank 1 compiles (rank 1
    # on itself likewise)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    took = run_ranks(_cold_start_job, 2, str(roots[2]), timeout=200,
                     start_method=["forkserver", "spawn"],
                     rank_env={1: {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}})
    assert any((tmp_path / "numba").rglob("*.nbi")), "numba did not use the empty cache"
    for rank_took in took:  # nothing left to compile: first calls are quick
        assert max(rank_took.values()) < COLD_TIMEOUT_S / 2, took


# ---- faults ---------------------------------------------------------------------------
def _fault_job(root: str) -> Dict:
    import time

    from pyg_dist.sampler._types import HopRequest

    ctx, data = _stores(root)
    sampler = DistNeighborSampler(data, num_neighbors=[2], current_ctx=ctx, seed=0)
    book = sampler.meta.node_book(HOMO_NODE)
    out = {}
    try:
        sampler.group.loop.run(sampler.sample_subgraph({HOMO_NODE: torch.tensor([book.total])}))
    except ValueError as exc:
        out["range"] = str(exc)
    if ctx.rank == 1:
        torch.distributed.barrier()  # rank 0 has had its answer from this rank
        os._exit(1)  # a peer dies mid-epoch
    bad = HopRequest([HOMO_EDGE], [torch.tensor([book.start(0)])], [2], [None], False,
                     "uniform", None, None, 0)
    try:  # partition 1 does not own this seed: its error comes back to the caller
        sampler.group.call(1, "sampler.hop", bad)
    except ValueError as exc:
        out["remote"] = str(exc)
    torch.distributed.barrier()
    remote_seed = torch.tensor([book.start(1)])
    start = time.monotonic()
    try:
        while time.monotonic() - start < 60:
            sampler.group.loop.run(sampler.sample_subgraph({HOMO_NODE: remote_seed}))
    except RpcPeerError as exc:
        out["dead"] = str(exc)
    out["dead_after_s"] = time.monotonic() - start
    out["unretrieved"] = _unretrieved_after_dead_fetch(sampler, book.start(1))
    shutdown_rpc(graceful=False)
    return out


def _unretrieved_after_dead_fetch(sampler: DistNeighborSampler, first_remote: int) -> list:
    """Fetches 20 rows from the dead partition in many requests at once (a tiny
    ``max_rpc_bytes``); returns what asyncio logged about exceptions nobody retrieved."""
    import gc
    import logging
    import time

    from pyg_dist.sampler import FeatureFetcher

    logged: list = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore
    logging.getLogger("asyncio").addHandler(handler)
    fetcher = FeatureFetcher(sampler.group, sampler.local, sampler.meta, max_rpc_bytes=64)
    ids = torch.arange(first_remote, first_remote + 20)
    try:
        sampler.group.loop.run(fetcher.fetch({HOMO_NODE: ids}, {}))
        logged.append("the fetch from a dead peer succeeded")
    except RpcPeerError:
        pass
    time.sleep(1.0)  # every request to the dead peer has failed by now
    sampler.group.loop.run(asyncio.sleep(0.1))
    gc.collect()
    logging.getLogger("asyncio").removeHandler(handler)
    return logged


@pytest.mark.timeout(120)
def test_faults_out_of_range_remote_error_and_dead_peer(cora_parts):
    _, roots = cora_parts
    out = run_ranks(_fault_job, 2, str(roots[2]), timeout=100, may_die=[1],
                    extra_env={DIRECT_ENV: "0"})[0]  # peer faults: the RPC path
    assert "out of range" in out["range"] or "2708" in out["range"], out["range"]
    assert "trainers0-1" in out["remote"] and "own" in out["remote"], out["remote"]
    assert "rank 1" in out["dead"] and out["dead_after_s"] < 30, out
    assert out["unretrieved"] == [], out["unretrieved"]  # every failure was retrieved


def _pyg_interface_job(root: str, seeds: torch.Tensor, links: torch.Tensor, node_type,
                       edge_type) -> Dict:
    """PyG's sampler interface in original ids: nodes, links, and a bad id."""
    from torch_geometric.sampler import EdgeSamplerInput, NodeSamplerInput

    ctx, data = _stores(root)
    try:
        sampler = DistNeighborSampler(data, num_neighbors=[3, 2], current_ctx=ctx, seed=ctx.rank)
        nodes = sampler.sample_from_nodes(NodeSamplerInput(torch.arange(seeds.numel()), seeds,
                                                           input_type=node_type))
        edges = sampler.sample_from_edges(EdgeSamplerInput(
            torch.arange(links.size(1)), links[0], links[1], input_type=edge_type))
        try:
            sampler.sample_from_nodes(NodeSamplerInput(torch.arange(1), torch.tensor([10**9]),
                                                       input_type=node_type))
            error = ""
        except ValueError as exc:
            error = str(exc)
        out = [{k: getattr(o, k) for k in ("node", "row", "col", "edge", "metadata")}
               for o in (nodes, edges)]
        return {"outputs": out, "error": error}
    finally:
        shutdown_rpc()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("graph,num_parts", [("cora", 2), ("hetero", 3)])
def test_pyg_sampler_interface_speaks_original_ids(cora_parts, hetero_parts, graph, num_parts):
    """``sample_from_nodes``/``sample_from_edges`` (what PyG's ``NodeLoader``/
    ``LinkLoader`` call) take the dataset's node ids and return original node and edge
    ids: every sampled edge is the original graph's edge of that id between those nodes,
    seeds come first, and an id out of range is an error naming ``index.node``."""
    data, roots = cora_parts if graph == "cora" else hetero_parts
    nodes, edges = typed(data)
    node_type = None if graph == "cora" else "paper"
    edge_type = None if graph == "cora" else ("paper", "cites", "paper")
    key = edge_type or HOMO_EDGE
    g = torch.Generator().manual_seed(5)
    num = nodes[node_type or HOMO_NODE]
    seeds = torch.randperm(num, generator=g)[:12]
    links = edges[key][:, torch.randperm(edges[key].size(1), generator=g)[:6]]
    results = run_ranks(_pyg_interface_job, num_parts, str(roots[num_parts]), seeds, links,
                        node_type, edge_type, timeout=150)
    for res in results:
        assert "index.node" in res["error"] and "1000000000" in res["error"], res["error"]
        for i, out in enumerate(res["outputs"]):
            node = out["node"] if isinstance(out["node"], dict) else {HOMO_NODE: out["node"]}
            wrap = (lambda v: v) if isinstance(out["row"], dict) else (lambda v: {HOMO_EDGE: v})
            row, col, edge = wrap(out["row"]), wrap(out["col"]), wrap(out["edge"])
            sampled = 0
            for et, eids in edge.items():
                src, dst = node[et[0]][row[et]], node[et[2]][col[et]]
                assert torch.equal(edges[et][:, eids], torch.stack([src, dst])), et
                sampled += eids.numel()
            assert sampled > 0
            first = node[node_type or HOMO_NODE]
            if i == 0:
                assert torch.equal(first[:seeds.numel()], seeds)
            else:  # the link's ends are among the sampled nodes, at edge_label_index
                label_index = out["metadata"][1]
                assert torch.equal(first[label_index], links)
