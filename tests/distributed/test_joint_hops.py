"""Ranks that read every partition on their machine sample each hop in one pass
(:mod:`pyg_dist.sampler._joint_hop`): the same batches as the per-partition path,
draw for draw, on 2 and 3 partitions, homogeneous and heterogeneous, with and without
replacement, disjoint or not."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch

from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.format import _partition_io as io
from pyg_dist.rpc import shutdown_rpc
from pyg_dist.sampler._direct import ENV as DIRECT_ENV
from pyg_dist.testing import encode_ids, run_ranks

pytestmark = pytest.mark.multiprocess  # every test here starts processes

OPTIONS = [{}, {"replace": True}, {"disjoint": True}]


def _fields(sub) -> Dict[str, object]:
    return {"node": sub.node, "row": sub.row, "col": sub.col, "edge": sub.edge,
            "batch": sub.batch, "num_nodes": sub.num_sampled_nodes,
            "num_edges": sub.num_sampled_edges, "original": sub.original_edge}


def _both_paths_job(root: str, fanouts: List[int], seed_type: str) -> List[dict]:
    """Per option set and batch: the joint path's subgraph and the per-partition path's,
    sampled with the same random stream; and whether the joint path ran at all."""
    ctx = DistContext.from_env(rpc_timeout=30)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    try:
        out = []
        num = data[1].meta.num_nodes[seed_type]
        for k, options in enumerate(OPTIONS):
            sampler = DistNeighborSampler(data, num_neighbors=fanouts, current_ctx=ctx,
                                          seed=k, **options)
            joint = sampler._joint_hops()
            for b in range(3):
                seeds = torch.randperm(num, generator=torch.Generator().manual_seed(
                    10 * ctx.rank + b))[:40]
                subs = []
                for path in (joint, None):
                    sampler._joint = (sampler.bound(), path)
                    rng = np.random.default_rng([k, b, ctx.rank])
                    subs.append(_fields(sampler.group.loop.run(
                        sampler.sample_subgraph({seed_type: seeds}, rng=rng))))
                out.append({"options": options, "joint_ran": joint is not None,
                            "joint": subs[0], "parts": subs[1]})
        return out
    finally:
        shutdown_rpc()


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


@pytest.fixture(scope="module")
def roots(cora, hetero_graph, tmp_path_factory):
    out = {}
    for name, graph in (("cora", cora), ("hetero", hetero_graph)):
        data = encode_ids(graph)
        for n in (2, 3):
            root = tmp_path_factory.mktemp(f"{name}{n}")
            Partitioner(data, n, root, seed=0, overwrite=True, progress=False).generate()
            out[name, n] = root
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name,num_parts", [("cora", 2), ("cora", 3), ("hetero", 2),
                                            ("hetero", 3)])
def test_joint_hops_sample_what_the_per_partition_path_samples(roots, name, num_parts):
    seed_type = "paper" if name == "hetero" else "_N"
    results = run_ranks(_both_paths_job, num_parts, str(roots[name, num_parts]), [6, 4],
                        seed_type, timeout=200, extra_env={DIRECT_ENV: "1"})
    for rank_out in results:
        assert len(rank_out) == 3 * len(OPTIONS)
        for batch in rank_out:
            assert batch["joint_ran"], batch["options"]  # every partition is read here
            assert sum(n for ns in batch["joint"]["num_edges"].values() for n in ns) > 0
            assert _same(batch["joint"], batch["parts"]), batch["options"]


def _off_job(root: str) -> bool:
    ctx = DistContext.from_env(rpc_timeout=30)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    try:
        plain = DistNeighborSampler(data, num_neighbors=[3], current_ctx=ctx, seed=0)
        weighted = DistNeighborSampler(data, num_neighbors=[3], current_ctx=ctx, seed=0,
                                       weight_attr="edge_weight")
        return [plain._joint_hops() is not None, weighted._joint_hops() is not None]
    finally:
        shutdown_rpc()


@pytest.mark.timeout(120)
def test_joint_hops_only_where_every_partition_is_read_here(roots):
    """Over RPC (no direct reads) and for weighted sampling the per-partition path runs."""
    root = str(roots["hetero", 2])
    assert run_ranks(_off_job, 2, root, timeout=100, extra_env={DIRECT_ENV: "1"}) == \
        [[True, False], [True, False]]
    assert run_ranks(_off_job, 2, root, timeout=100, extra_env={DIRECT_ENV: "0"}) == \
        [[False, False], [False, False]]
