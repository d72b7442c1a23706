"""DistGraph (the whole-graph view) on 3 ranks against the unpartitioned graph, and a
DistEmbedding that follows the graph, indexed by original ids.

Every rank asks about ids of every owner (original ids); the parent compares each
answer with ground truth computed on the original ``Data``/``HeteroData``. The
homogeneous job goes over RPC only, the heterogeneous one reads same-machine
partitions directly, so both paths of every callee are exercised.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
import torch
from torch_geometric.data import TensorAttr
from torch_geometric.utils import degree

import torch.distributed as dist

from pyg_dist import (DistContext, DistEmbedding, DistGraph, DistNeighborLoader,
                      LocalFeatureStore, LocalGraphStore, Partitioner)
from pyg_dist.format import _partition_io as io
from pyg_dist.rpc import shutdown_rpc
from pyg_dist.sampler._direct import ENV as DIRECT_ENV
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids, typed

pytestmark = pytest.mark.multiprocess

WORLD = 3


def _pick(n: int, rank: int, k: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randint(0, n, (k,), generator=g)  # repeats and every owner


def _errors(view: DistGraph, node_type, edge_type) -> Dict[str, str]:
    """The message of each bad call (each must name its argument)."""
    n = view.num_nodes(node_type)
    calls = {
        "index": lambda: view.get_tensor(TensorAttr(node_type, "x", torch.tensor([0, n]))),
        "ids": lambda: view.in_degrees(torch.tensor([0.5]), edge_type),
        "eids": lambda: view.find_edges(torch.tensor([-1]), edge_type),
        "seeds": lambda: view.sample_neighbors(
            {node_type: torch.tensor([n + 3])} if view.is_hetero else torch.tensor([n + 3]), 2),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "no error"
        except (TypeError, ValueError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def _view_job(root: str) -> dict:
    ctx = DistContext.from_env(rpc_timeout=30)
    meta = io.read_meta(Path(root))
    pid = ctx.partition_id(meta.num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    try:
        view = DistGraph(data, current_ctx=ctx)
        out: dict = {"num_nodes": {t: view.num_nodes(t if view.is_hetero else None)
                                   for t in meta.node_types},
                     "num_edges": {t: view.num_edges(t if view.is_hetero else None)
                                   for t in meta.edge_types},
                     "total": (view.num_nodes(), view.num_edges()), "nodes": {}, "edges": {}}
        for t in meta.node_types:
            name = t if view.is_hetero else None
            ids = _pick(meta.num_nodes[t], ctx.rank)
            out["nodes"][t] = {"ids": ids, "x": view[name, "x", ids],
                               "nid": view.get_tensor(name, "nid", index=ids.view(4, 10)),
                               "slice": view[name, "nid", 5:9]}
        for et in meta.edge_types:
            name = et if view.is_hetero else None
            eids = _pick(meta.num_edges[et], ctx.rank)
            src = _pick(meta.num_nodes[et[0]], ctx.rank + 7)
            dst = _pick(meta.num_nodes[et[2]], ctx.rank + 9)
            seeds = dst[:6]
            sampled = view.sample_neighbors({et[2]: seeds} if view.is_hetero else seeds, -1)
            few = view.sample_neighbors({et[2]: seeds} if view.is_hetero else seeds, [2])
            out["edges"][et] = {
                "eids": eids, "ends": view.find_edges(eids, name),
                "oid": view.get_tensor(TensorAttr(name, "oid", eids)),
                "src": src, "out": view.out_degrees(src, name),
                "dst": dst, "in": view.in_degrees(dst, name), "seeds": seeds,
                "full": _plain(sampled), "few": _plain(few)}
        out["sizes"] = {str(a.group_name) + "/" + a.attr_name: view.get_tensor_size(a)
                        for a in view.get_all_tensor_attrs()}
        nt, et = meta.node_types[0], meta.edge_types[0]
        out["errors"] = _errors(view, nt if view.is_hetero else None,
                                et if view.is_hetero else None)
        out["embedding"] = _embedding(data, ctx, view.is_hetero)
        return out
    finally:
        shutdown_rpc()


def _embedding(data, ctx: DistContext, hetero: bool) -> dict:
    """A table following the graph: each rank writes its own nodes' rows by original
    id, then reads any ids; a batch's ``n_id`` maps to its ``part_n_id`` without
    translation, and rows of owned nodes are on this rank."""
    features, meta = data[0], data[0].meta
    node_type = meta.node_types[0]
    name = node_type if hetero else None
    n = meta.num_nodes[node_type]
    emb = DistEmbedding(n, 2, name="view_emb", partition=meta, node_type=name)
    owned = features.owned_ids(node_type).ids.clone()
    emb.weight[owned] = torch.stack([owned, 2 * owned], 1).float()
    dist.barrier()  # every row written before anyone reads
    pick = _pick(n, ctx.rank)
    got = emb(pick.view(5, 8))
    loader = DistNeighborLoader(data, [3], input_nodes=(name, owned[:20]) if hetero else
                                owned[:20], batch_size=20, current_ctx=ctx)
    batch = next(iter(loader))
    store = batch[node_type] if hetero else batch
    lo, hi = emb.weight.local_range
    own_rows = emb.weight.rows(owned)[0]
    out = {"pick": pick, "got": got.detach().view(-1, 2), "grad": got.requires_grad,
           "memo": torch.equal(emb.weight.rows(store.n_id)[0], store.part_n_id),
           "translated": torch.equal(emb.weight.rows(store.n_id.clone())[0], store.part_n_id),
           "relabelled": torch.equal(emb(store.part_n_id, relabelled=True), emb(store.n_id)),
           "local": bool(((own_rows >= lo) & (own_rows < hi)).all()),
           "batch": (store.n_id, emb(store.n_id).detach())}
    errors = []
    for bad in (torch.tensor([n]), torch.tensor([0.5]), torch.tensor([-2])):
        try:
            emb(bad)
            errors.append("no error")
        except (TypeError, ValueError) as exc:
            errors.append(str(exc))
    out["errors"] = errors
    loader.close()
    dist.barrier()  # nobody leaves while a peer may still read its rows
    return out


def _check_embedding(got: dict) -> None:
    pick = got["pick"]
    assert torch.equal(got["got"], torch.stack([pick, 2 * pick], 1).float()) and got["grad"]
    assert got["memo"] and got["translated"] and got["relabelled"] and got["local"]
    n_id, rows = got["batch"]
    assert torch.equal(rows, torch.stack([n_id, 2 * n_id], 1).float())
    assert all(message.startswith("DistTensor 'view_emb'") and "ids" in message
               for message in got["errors"]), got["errors"]


def _plain(o) -> dict:
    return {"node": o.node, "row": o.row, "col": o.col, "edge": o.edge}


def _check(data, results: List[dict]) -> None:
    num_nodes, edges = typed(data)
    hetero = "paper" in num_nodes
    for out in results:
        assert out["num_nodes"] == num_nodes
        assert out["num_edges"] == {t: e.size(1) for t, e in edges.items()}
        assert out["total"] == (sum(num_nodes.values()), sum(e.size(1) for e in edges.values()))
        for t, got in out["nodes"].items():
            store = data[t] if hetero else data
            assert torch.equal(got["x"], store.x[got["ids"]])
            assert torch.equal(got["nid"], got["ids"].view(4, 10))
            assert got["slice"].tolist() == [5, 6, 7, 8]
        for et, got in out["edges"].items():
            index = edges[et]
            assert torch.equal(torch.stack(got["ends"]), index[:, got["eids"]])
            assert torch.equal(got["oid"], got["eids"])
            out_deg = degree(index[0], num_nodes[et[0]]).long()
            in_deg = degree(index[1], num_nodes[et[2]]).long()
            assert torch.equal(got["out"], out_deg[got["src"]])
            assert torch.equal(got["in"], in_deg[got["dst"]])
            _check_sampled(got["full"], got["few"], index, got["seeds"], et, hetero)
        for name, message in out["errors"].items():
            assert message.startswith(("TypeError", "ValueError")) and name in message, \
                (name, message)
        _check_embedding(out["embedding"])
    sizes = results[0]["sizes"]
    if hetero:
        assert sizes["paper/x"] == (num_nodes["paper"], 8)
    else:
        assert sizes["None/x"] == tuple(data.x.shape)


def _edges_of(sampled: dict, et, hetero: bool) -> torch.Tensor:
    pick = (lambda d, t: d[t]) if hetero else (lambda d, t: d)
    node_src, node_dst = pick(sampled["node"], et[0]), pick(sampled["node"], et[2])
    row, col, eid = (pick(sampled[k], et) for k in ("row", "col", "edge"))
    return torch.stack([node_src[row], node_dst[col], eid])


def _check_sampled(full: dict, few: dict, index, seeds, et, hetero: bool) -> None:
    uniq = torch.unique(seeds)
    nodes = full["node"][et[2]] if hetero else full["node"]
    first = torch.unique(seeds, sorted=False)  # seeds first, once each
    assert set(nodes[:first.numel()].tolist()) == set(uniq.tolist())
    got = _edges_of(full, et, hetero)
    assert torch.equal(index[:, got[2]], got[:2])  # every sampled edge is that edge
    want = torch.nonzero(torch.isin(index[1], uniq)).view(-1)
    assert sorted(got[2].tolist()) == sorted(want.tolist())  # all in-edges of the seeds
    got = _edges_of(few, et, hetero)
    assert torch.equal(index[:, got[2]], got[:2])
    per_dst = torch.bincount(got[1], minlength=int(index.max()) + 1)
    assert int(per_dst.max()) <= 2 and got[2].unique().numel() == got[2].numel()


@pytest.fixture(scope="module")
def cora3(cora, tmp_path_factory):
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("view_cora3")
    Partitioner(data, WORLD, root, seed=0, progress=False).generate()
    return data, root


@pytest.fixture(scope="module")
def hetero3(hetero_graph, tmp_path_factory):
    data = encode_ids(hetero_graph)
    root = tmp_path_factory.mktemp("view_hetero3")
    Partitioner(data, WORLD, root, seed=0, progress=False).generate()
    return data, root


@pytest.mark.timeout(300)
def test_view_answers_like_the_whole_graph_homo(cora3):
    data, root = cora3
    results = run_ranks(_view_job, WORLD, str(root), timeout=240,
                        extra_env={DIRECT_ENV: "0"})
    _check(data, results)


@pytest.mark.timeout(300)
def test_view_answers_like_the_whole_graph_hetero(hetero3):
    data, root = hetero3
    results = run_ranks(_view_job, WORLD, str(root), timeout=240,
                        extra_env={DIRECT_ENV: "1"})
    _check(data, results)
