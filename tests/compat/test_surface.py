"""The names torch_geometric.distributed's scripts use, in one process."""
from __future__ import annotations

import pytest
import torch

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      Partitioner, shutdown_rpc)
from pyg_dist.format import _partition_io as io
from pyg_dist.testing import encode_ids


@pytest.fixture(scope="module")
def cora1(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora_compat")
    Partitioner(encode_ids(cora), 1, root, progress=False).generate()
    yield root
    shutdown_rpc()


def _stores(root):
    return LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0)


def test_dist_context_takes_pyg_arguments():
    ctx = DistContext(rank=1, global_rank=1, world_size=2, global_world_size=2,
                      group_name="distributed-sage")
    assert (ctx.rank, ctx.world_size, ctx.group_name) == (1, 2, "distributed-sage")
    with pytest.raises(ValueError, match="global_rank=0 differs from rank=1"):
        DistContext(rank=1, global_rank=0, world_size=2, global_world_size=2)


def test_meta_reads_like_pyg_dict(cora1, hetero_graph, tmp_path):
    _, graph = _stores(cora1)
    assert graph.meta["num_parts"] == 1 and graph.meta["is_hetero"] is False
    assert graph.meta["node_types"] is None and graph.meta["edge_types"] is None
    Partitioner(hetero_graph, 2, tmp_path / "h", progress=False).generate()
    meta = io.read_meta(tmp_path / "h")
    assert meta["node_types"] == list(hetero_graph.node_types)
    assert [tuple(e) for e in meta["edge_types"]] == list(hetero_graph.edge_types)
    with pytest.raises(KeyError, match="node_feat_schema"):
        meta["node_feat_schema"]


def test_feature_store_pyg_names(cora1):
    features, _ = _stores(cora1)
    ids = features._global_id[None]
    assert torch.equal(ids, torch.arange(features.meta.num_nodes["_N"]))
    assert torch.equal(features._feat[(None, "x")], features.get_tensor(None, "x"))
    features.put_tensor(torch.ones(ids.numel(), 2), group_name=None, attr_name="extra")
    assert features.get_tensor(None, "extra").shape == (ids.numel(), 2)
    with pytest.raises(ValueError, match="one row per node"):
        features.labels = torch.zeros(5)


def test_labels_give_batch_y_and_pyg_loader_options_are_accepted(cora1):
    features, graph = _stores(cora1)
    features.labels = torch.arange(features.meta.num_nodes["_N"]) * 10
    ctx = DistContext(rank=0, world_size=1)
    loader = DistNeighborLoader((features, graph), [3], input_nodes=torch.arange(8),
                                batch_size=4, current_ctx=ctx, master_addr="localhost",
                                master_port=11112, async_sampling=True,
                                persistent_workers=False, filter_per_worker=False,
                                num_rpc_threads=8)
    with loader.enable_multithreading(2) as same:
        assert same is loader and loader.worker_threads == 2
    assert loader.worker_threads == 1
    with loader as iterator:
        batch = next(iter(iterator))
    assert torch.equal(batch.y, batch.n_id * 10)  # from labels, not the stored y
    with pytest.raises(TypeError, match="unexpected keyword argument 'master_adress'"):
        DistNeighborLoader((features, graph), [3], input_nodes=torch.arange(8),
                           current_ctx=ctx, master_adress="localhost")
    with pytest.raises(NotImplementedError, match="dist_sampler"):
        DistNeighborLoader((features, graph), [3], input_nodes=torch.arange(8),
                           current_ctx=ctx, dist_sampler=object())
    loader.close()
