"""Sampled inference on heterogeneous graphs: with full neighbourhoods (``-1`` per hop,
as many hops as layers) it equals the single-machine full-batch ``to_hetero`` model
on the ``HeteroData``; with a small fan-out every node of every output type gets one
finite row; in one process and on 2 and 3 partitions, every node exactly once."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
import torch
import torch.distributed as dist

from infer_models import build_hetero, hetero_expected, hetero_references
from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, Partitioner, shutdown_rpc
from pyg_dist.format import _partition_io as io
from pyg_dist.inference import export, infer, read_export, _tensor_rows as rows, sampled
from pyg_dist.testing import run_ranks

TYPES = ["paper", "author", "institution"]


def _stores(root: Path, pid: int = 0):
    return (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))


@pytest.fixture(scope="module")
def hetero1(hetero_graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("sampled_hetero1")
    Partitioner(hetero_graph, 1, root, seed=0, progress=False).generate()
    return hetero_graph, root


def _own(result) -> Dict[str, tuple]:
    """This rank's ``(start, stop, rows)`` of every node type of a result."""
    return {t: (*rows.own_range(r), rows.own_rows(r, *rows.own_range(r)))
            for t, r in result.items()}


def _job(root: str, names: List[str]) -> Dict:
    ctx = DistContext.from_env(rpc_timeout=60)
    if ctx.world_size > 1:
        dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    meta = io.read_meta(Path(root))
    data = _stores(Path(root), ctx.partition_id(meta.num_parts))
    metadata = (list(meta.node_types), list(meta.edge_types))
    out = {}
    for name in names:
        result = infer(build_hetero(name, metadata), data, num_neighbors=[-1, -1],
                       batch_size=700, progress=False, ctx=ctx)
        out[name] = _own(result)
        del result  # a result still held at exit after shutdown_rpc hangs exit
    result = sampled(build_hetero("sage_res", metadata), data, [2, 2], batch_size=500,
                     progress=False, ctx=ctx)
    out["fanout2"] = _own(result)
    del result
    if ctx.world_size > 1:
        shutdown_rpc()
    return out


def _check(results, expected) -> None:
    """Every node of every type exactly once; full fan-out equal to the reference;
    the small fan-out one finite row per node."""
    for name, refs in {**expected, "fanout2": None}.items():
        types = sorted(refs) if refs is not None else sorted(TYPES)
        for rank_out in results:
            assert sorted(rank_out[name]) == types, name
        for node_type in types:
            num_nodes = max(out[name][node_type][1] for out in results)
            seen = torch.zeros(num_nodes, dtype=torch.long)
            for rank_out in results:
                start, stop, got = rank_out[name][node_type]
                seen[start:stop] += 1
                if refs is None:
                    assert bool(torch.isfinite(got).all()) and got.size(1) == 4
                else:
                    assert torch.allclose(got, refs[node_type][start:stop], atol=1e-5,
                                          rtol=0), (name, node_type)
            assert bool((seen == 1).all()), f"{name}/{node_type}: every node exactly once"
            if refs is not None:
                assert num_nodes == refs[node_type].size(0)


def test_one_process_full_fanout_equals_full_batch(hetero1):
    data, root = hetero1
    names = ["sage_res", "encode_gat", "heteroconv"]
    _check([_job(str(root), names)], hetero_expected(data, root, names))


def test_node_types_selects_and_orders(hetero1):
    data, root = hetero1
    model = build_hetero("sage_res", data.metadata()).train()
    out = sampled(model, _stores(root), [-1, -1], node_types=["institution", "author"],
                  batch_size=400, progress=False)
    assert model.training  # its mode is restored
    assert list(out) == ["institution", "author"]
    expected = hetero_expected(data, root, ["sage_res"])["sage_res"]
    for node_type, result in out.items():
        got = result[torch.arange(expected[node_type].size(0))]
        assert torch.allclose(got, expected[node_type], atol=1e-5, rtol=0)


class PapersOnly(torch.nn.Module):
    """A hetero model whose output holds only papers."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 3)

    def forward(self, x_dict, edge_index_dict):
        return {"paper": self.lin(x_dict["paper"])}


def test_default_types_are_those_the_model_outputs(hetero1):
    data, root = hetero1
    out = sampled(PapersOnly(), _stores(root), [1], batch_size=1000, progress=False)
    assert list(out) == ["paper"]
    with pytest.raises(RuntimeError, match="no node type 'author'"):
        sampled(PapersOnly(), _stores(root), [1], node_types=["author"], progress=False)


@pytest.mark.parametrize("node_types, error, match", [
    (["paper", "venue"], ValueError, "'venue' is not a node type"),
    (["paper", "paper"], ValueError, "repeats"),
    ("paper", TypeError, "list of node types")])
def test_bad_node_types(hetero1, node_types, error, match):
    data, root = hetero1
    model = build_hetero("sage_res", data.metadata())
    with pytest.raises(error, match=match):
        sampled(model, _stores(root), [2, 2], node_types=node_types, progress=False)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("parts, world, names", [
    (2, 2, ["sage_res", "encode_gat"]),
    (3, 3, ["sage_res", "heteroconv"]),
    (1, 2, ["sage_res"])])
def test_partitions_full_fanout_equals_full_batch(hetero_graph, tmp_path, parts, world, names):
    """(1, 2): two ranks share one partition and split the nodes of every type."""
    Partitioner(hetero_graph, parts, tmp_path, seed=0, progress=False).generate()
    expected = hetero_expected(hetero_graph, tmp_path, names)
    results = run_ranks(_job, world, str(tmp_path), names, timeout=100)
    _check(results, expected)


def test_export_by_original_id(hetero1, tmp_path):
    """The result exports like layer-wise inference's: per node type, by original id."""
    data, root = hetero1
    out = infer(build_hetero("sage_res", data.metadata()), _stores(root),
                num_neighbors=[-1, -1], batch_size=800, progress=False)
    export(out, root, tmp_path / "emb")
    got = read_export(tmp_path / "emb")
    refs = hetero_references(data, ["sage_res"])["sage_res"]
    assert sorted(got) == sorted(TYPES)
    for node_type, (ids, values) in got.items():
        assert sorted(ids.tolist()) == list(range(refs[node_type].size(0)))
        assert torch.allclose(torch.as_tensor(values), refs[node_type][torch.as_tensor(ids)],
                              atol=1e-5, rtol=0), node_type
