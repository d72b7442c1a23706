"""Sampled inference: every node exactly once, in one process and on 2 partitions; with
full neighbourhoods (``-1`` per hop) it equals full-batch inference."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.distributed as dist

from infer_models import build, references
from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, Partitioner, shutdown_rpc
from pyg_dist.inference import infer, _tensor_rows as rows
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map
from pyg_dist.testing import run_ranks


class SeedFeatures(torch.nn.Module):
    """Returns its input rows: a seed's output is its own (original-id-specific)
    feature row, so a node written with another node's row shows."""

    def forward(self, x, edge_index):
        return x


def _stores(root: Path, pid: int = 0):
    return (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))


def _job(root: str) -> Dict:
    ctx = DistContext.from_env(rpc_timeout=60)
    if ctx.world_size > 1:
        dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    data = _stores(Path(root), ctx.partition_id(io.read_meta(Path(root)).num_parts))
    feats = infer(SeedFeatures(), data, num_neighbors=[3], batch_size=97, progress=False,
                  ctx=ctx)
    model = build("sage", int(data[0].get_tensor_size(None, "x")[1]))
    full = infer(model, data, num_neighbors=[-1, -1, -1], batch_size=1400, progress=False,
                 ctx=ctx)
    out = {}
    for name, result in (("feats", feats), ("sage", full)):
        start, stop = rows.own_range(result)
        out[name] = (start, stop, rows.own_rows(result, start, stop))
    if ctx.world_size > 1:
        shutdown_rpc()
    return out


def _check(results, data, root: Path) -> None:
    node_map = read_id_map(root)
    expected = {"feats": data.x[node_map], "sage": references(data, ["sage"])["sage"][node_map]}
    for name, ref in expected.items():
        seen = torch.zeros(data.num_nodes, dtype=torch.long)
        for out in results:
            start, stop, got = out[name]
            seen[start:stop] += 1
            assert torch.allclose(got, ref[start:stop], atol=1e-5, rtol=0), name
        assert bool((seen == 1).all())


def test_one_process_every_node_once(cora, tmp_path):
    Partitioner(cora, 1, tmp_path, seed=0, progress=False).generate()
    _check([_job(str(tmp_path))], cora, tmp_path)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_two_partitions_every_node_once(cora, tmp_path):
    Partitioner(cora, 2, tmp_path, seed=0, progress=False).generate()
    _check(run_ranks(_job, 2, str(tmp_path), timeout=240), cora, tmp_path)
