"""Layer-wise exact inference on heterogeneous graphs equals the single-machine model on
the ``HeteroData``: ``to_hetero`` models (with a residual, and with a per-type encoder
before the first layer) and a user model of ``HeteroConv`` layers; one process here,
2 and 3 partitions, mapped and private stores, direct reads on and off, and two ranks
sharing a partition in real multi-process jobs."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.distributed as dist
from torch_geometric.nn import SAGEConv, to_hetero

from infer_models import HETERO, build_hetero, hetero_expected
from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, Partitioner, shutdown_rpc
from pyg_dist.format import _partition_io as io
from pyg_dist.inference import NotLayerwiseError, layerwise, _tensor_rows as rows
from pyg_dist.testing import run_ranks

NAMES = list(HETERO)


def _stores(root: Path, pid: int = 0, mmap: bool = True):
    return (LocalFeatureStore.from_partition(root, pid, mmap=mmap),
            LocalGraphStore.from_partition(root, pid, mmap=mmap))


@pytest.fixture(scope="module")
def hetero1(hetero_graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("hetero1")
    Partitioner(hetero_graph, 1, root, seed=0, progress=False).generate()
    return hetero_graph, root


@pytest.mark.parametrize("name", NAMES)
def test_one_process_equals_full_batch(hetero1, name):
    data, root = hetero1
    expected = hetero_expected(data, root, [name])[name]
    model = build_hetero(name, data.metadata()).train()
    out = layerwise(model, _stores(root), batch_size=700, progress=False)
    assert model.training
    assert sorted(out) == sorted(expected)
    for node_type, ref in expected.items():
        got = out[node_type][torch.arange(ref.size(0))]
        assert torch.allclose(got, ref, atol=1e-5, rtol=0), node_type


def test_mapped_scratch_equals_memory(hetero1, tmp_path):
    data, root = hetero1
    expected = hetero_expected(data, root, ["sage_res"])["sage_res"]
    out = layerwise(build_hetero("sage_res", data.metadata()), _stores(root), batch_size=999,
                    progress=False, scratch_dir=tmp_path)
    for node_type, ref in expected.items():
        assert torch.allclose(out[node_type][torch.arange(ref.size(0))], ref, atol=1e-5, rtol=0)
    assert list(tmp_path.iterdir()) == []  # files are unlinked once mapped


class CrossType(torch.nn.Module):
    """Reads another node type's rows after a layer: not layer-wise."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = SAGEConv((8, 8), 4)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index) + x.sum()


def test_not_layerwise_names_the_graph_node(hetero1):
    data, root = hetero1
    model = to_hetero(CrossType(), data.metadata(), aggr="sum")
    with pytest.raises(NotLayerwiseError, match="num_neighbors"):
        layerwise(model, _stores(root), progress=False)


# ---- multi-process ----------------------------------------------------------------
def _job(root: str, names, batch_size: int, mmap: bool, direct: bool) -> Dict:
    ctx = dataclasses.replace(DistContext.from_env(rpc_timeout=60), direct_reads=direct)
    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    meta = io.read_meta(Path(root))
    data = _stores(Path(root), ctx.partition_id(meta.num_parts), mmap=mmap)
    metadata = (list(meta.node_types), list(meta.edge_types))
    out = {}
    for name in names:
        result = layerwise(build_hetero(name, metadata), data, batch_size=batch_size,
                           progress=False, ctx=ctx)
        out[name] = {t: (*rows.own_range(r), rows.own_rows(r, *rows.own_range(r)))
                     for t, r in result.items()}
        del result  # a to_hetero result still held at exit after shutdown_rpc hangs exit
    shutdown_rpc()
    return out


def _check(results, expected) -> None:
    for name, refs in expected.items():
        for node_type, ref in refs.items():
            seen = torch.zeros(ref.size(0), dtype=torch.long)
            for rank_out in results:
                start, stop, got = rank_out[name][node_type]
                seen[start:stop] += 1
                assert torch.allclose(got, ref[start:stop], atol=1e-5, rtol=0), \
                    (name, node_type)
            assert bool((seen == 1).all()), f"{name}/{node_type}: every node exactly once"


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
@pytest.mark.parametrize("parts, world, mmap, direct, names", [
    (2, 2, True, True, NAMES),
    (3, 3, False, False, ["sage_res", "heteroconv"]),
    (2, 2, True, False, ["encode_gat"]),
    (1, 2, True, True, ["sage_res"])])
def test_partitions_equal_full_batch(hetero_graph, tmp_path, parts, world, mmap, direct, names):
    """(1, 2): two ranks share one partition and split the nodes of every type."""
    Partitioner(hetero_graph, parts, tmp_path, seed=0, progress=False).generate()
    expected = hetero_expected(hetero_graph, tmp_path, names)
    results = run_ranks(_job, world, str(tmp_path), names, 333, mmap, direct, timeout=360)
    _check(results, expected)
