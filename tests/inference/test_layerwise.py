"""Layer-wise exact inference equals full-batch single-machine ``model(x, edge_index)``.

One process (one partition) here for every supported model, plus the errors a model
that cannot be split gets; 2 and 3 partitions, and 2 ranks sharing one partition, in
real multi-process jobs on Cora and a generated graph (with self loops and repeated
edges, which GCN's normalisation must count as PyG does).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.distributed as dist
from torch_geometric.nn import GraphNorm, SAGEConv, SGConv
from torch_geometric.nn.models import GraphSAGE

from infer_models import MODELS, build, generated_graph, references
from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, Partitioner, shutdown_rpc
from pyg_dist.inference import LayerwiseSpec, NotLayerwiseError, layerwise
from pyg_dist.inference import _tensor_rows as rows
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map
from pyg_dist.testing import run_ranks

NAMES = [name for name, _, _ in MODELS]


def _stores(root: Path, pid: int = 0):
    return (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))


@pytest.fixture(scope="module")
def cora1(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora1")
    Partitioner(cora, 1, root, seed=0, progress=False).generate()
    return cora, root


@pytest.mark.parametrize("name", NAMES)
def test_one_process_equals_full_batch(cora1, name):
    data, root = cora1
    expected = references(data, [name])[name][read_id_map(root)]
    model = build(name, data.num_features).train()  # inference switches to eval and back
    out = layerwise(model, _stores(root), batch_size=333, progress=False)
    assert model.training
    got = out[torch.arange(data.num_nodes)]
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)


class TwoSage(torch.nn.Module):
    """A user model describing itself with the documented protocol."""

    def __init__(self, in_dim: int) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.conv1, self.conv2 = SAGEConv(in_dim, 8, aggr="max"), SAGEConv(8, 3)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).tanh(), edge_index).log_softmax(-1)

    def layerwise_spec(self) -> LayerwiseSpec:
        return LayerwiseSpec([self.conv1, self.conv2],
                             after=lambda i, x: x.tanh() if i == 0 else x.log_softmax(-1))


def test_user_model_protocol(cora1):
    data, root = cora1
    model = TwoSage(data.num_features).eval()
    with torch.no_grad():
        expected = model(data.x, data.edge_index)[read_id_map(root)]
    got = layerwise(model, _stores(root), batch_size=1000, progress=False)
    assert torch.allclose(got[torch.arange(data.num_nodes)], expected, atol=1e-5, rtol=0)


class Plain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = SAGEConv(4, 4)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


@pytest.mark.parametrize("model, match", [
    (Plain(), "no layerwise_spec"),
    (GraphSAGE(4, 8, 2, jk="cat"), "jk='cat'"),
    (GraphSAGE(4, 8, 2, norm=GraphNorm(8)), "GraphNorm"),
    (GraphSAGE(4, 8, 2, norm="layer_norm"), "LayerNorm"),
])
def test_unsplittable_model_points_to_sampled_mode(cora1, model, match):
    with pytest.raises(NotLayerwiseError, match=match) as info:
        layerwise(model, _stores(cora1[1]), progress=False)
    assert "num_neighbors" in str(info.value)


def test_multi_hop_layer_and_bad_spec_rejected():
    with pytest.raises(NotLayerwiseError, match="SGConv.*num_neighbors"):
        LayerwiseSpec([SAGEConv(4, 4), SGConv(4, 4, K=2)])
    with pytest.raises(NotLayerwiseError, match="empty"):
        LayerwiseSpec([])


def test_wrong_feature_width_is_one_line_error(cora1):
    with pytest.raises(NotLayerwiseError, match="layer 0 .*width 1433"):
        layerwise(GraphSAGE(7, 8, 2), _stores(cora1[1]), progress=False)


def test_homogeneous_model_on_hetero_graph_points_to_to_hetero(hetero_graph, tmp_path):
    Partitioner(hetero_graph, 1, tmp_path, seed=0, progress=False).generate()
    with pytest.raises(NotLayerwiseError, match="graph is heterogeneous.*to_hetero"):
        layerwise(GraphSAGE(8, 8, 2), _stores(tmp_path), progress=False)


# ---- multi-process ----------------------------------------------------------------
def _job(root: str, names, batch_size: int) -> Dict:
    ctx = DistContext.from_env(rpc_timeout=60)
    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    num_parts = io.read_meta(Path(root)).num_parts
    data = _stores(Path(root), ctx.partition_id(num_parts))
    out = {}
    for name in names:
        model = build(name, _in_dim(data[0]))
        result = layerwise(model, data, batch_size=batch_size, progress=False, ctx=ctx)
        start, stop = rows.own_range(result)
        out[name] = (start, stop, rows.own_rows(result, start, stop))
    shutdown_rpc()
    return out


def _in_dim(features: LocalFeatureStore) -> int:
    return int(features.get_tensor_size(None, "x")[1])


def _check(results, expected: Dict[str, torch.Tensor], num_nodes: int) -> None:
    for name, ref in expected.items():
        seen = torch.zeros(num_nodes, dtype=torch.long)
        for rank_out in results:
            start, stop, got = rank_out[name]
            seen[start:stop] += 1
            assert torch.allclose(got, ref[start:stop], atol=1e-5, rtol=0), name
        assert bool((seen == 1).all()), f"{name}: every node computed by exactly one rank"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("parts, world, names", [
    (2, 2, NAMES), (3, 3, ["gcn", "gat"]), (1, 2, ["gcn", "sage"])])
def test_partitions_equal_full_batch_cora(cora, tmp_path, parts, world, names):
    """(1, 2): two ranks share one partition and split its nodes."""
    Partitioner(cora, parts, tmp_path, seed=0, progress=False).generate()
    expected = {n: r[read_id_map(tmp_path)] for n, r in references(cora, names).items()}
    results = run_ranks(_job, world, str(tmp_path), names, 600, timeout=240)
    _check(results, expected, cora.num_nodes)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("parts, names", [(2, ["gcn", "gin"]), (3, ["gcn", "sage_jk_bn"])])
def test_partitions_equal_full_batch_generated(tmp_path, parts, names):
    data = generated_graph()
    Partitioner(data, parts, tmp_path, seed=1, progress=False).generate()
    expected = {n: r[read_id_map(tmp_path)] for n, r in references(data, names).items()}
    results = run_ranks(_job, parts, str(tmp_path), names, 64, timeout=240)
    _check(results, expected, data.num_nodes)
