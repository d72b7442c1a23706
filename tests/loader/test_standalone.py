"""Loaders and sampler in one process (standalone mode: one partition, no RPC agent)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader,
                      DistNeighborSampler, LocalFeatureStore, LocalGraphStore, Partitioner,
                      edge_split, node_split, shutdown_rpc)
from pyg_dist.loader._seeds import EpochPlan
from pyg_dist.testing import encode_ids


@pytest.fixture(scope="module")
def cora1(cora, tmp_path_factory):
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora1")
    Partitioner(data, 1, root, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    yield data, stores, DistContext(rank=0, world_size=1)
    shutdown_rpc()


def test_node_loader_len_shuffle_and_epochs(cora1):
    data, stores, ctx = cora1
    ids = node_split(stores, "train", ctx)
    assert ids.numel() == int(data.train_mask.sum())
    loader = DistNeighborLoader(data=stores, num_neighbors=[10, 5], input_nodes=ids,
                                batch_size=32, shuffle=True, drop_last=True, current_ctx=ctx)
    assert len(loader) == ids.numel() // 32
    epochs = [torch.cat([b.n_id[:b.batch_size] for b in loader]) for _ in range(2)]
    assert all(e.numel() == 32 * len(loader) for e in epochs)
    assert not torch.equal(epochs[0], epochs[1])  # reshuffled with seed + epoch
    assert set(epochs[0].tolist()) <= set(ids.tolist())
    loader.close()


def test_disjoint_batches_keep_subtrees_apart(cora1):
    _, stores, ctx = cora1
    loader = DistNeighborLoader(data=stores, num_neighbors=[3, 2], input_nodes=None,
                                batch_size=8, disjoint=True, current_ctx=ctx)
    batch = next(iter(loader))
    assert torch.equal(batch.batch[:8], torch.arange(8))
    src, dst = batch.edge_index
    assert torch.equal(batch.batch[src], batch.batch[dst])  # edges stay in their subtree
    loader.close()


def test_triplet_link_batches(cora1):
    data, stores, ctx = cora1
    seeds = edge_split(stores, ctx)[:, :40]
    loader = DistLinkNeighborLoader(data=stores, num_neighbors=[3, 2], edge_label_index=seeds,
                                    neg_sampling=dict(mode="triplet", amount=2), batch_size=10,
                                    current_ctx=ctx)
    existing = set(map(tuple, data.edge_index.t().tolist()))
    for i, batch in enumerate(loader):
        src = batch.nid[batch.src_index]
        pos = batch.nid[batch.dst_pos_index]
        assert batch.dst_neg_index.shape == (10, 2)
        assert torch.equal(torch.stack([batch.n_id[batch.src_index],
                                        batch.n_id[batch.dst_pos_index]]),
                           seeds[:, 10 * i:10 * (i + 1)])
        assert all((s, d) in existing for s, d in zip(src.tolist(), pos.tolist()))
    loader.close()


def test_repeated_seeds_keep_input_id_aligned(cora1):
    _, stores, ctx = cora1
    sampler = DistNeighborSampler(stores, num_neighbors=[2], current_ctx=ctx)
    out = sampler.sample_from_nodes(NodeSamplerInput(torch.arange(5),
                                                     torch.tensor([4, 7, 4, 9, 7])))
    assert out.node[:5].tolist() == [4, 7, 4, 9, 7]  # kept in place, as PyG keeps them
    assert out.metadata[0].tolist() == [0, 1, 2, 3, 4]


def test_bad_inputs_are_clear_errors(cora1):
    _, stores, ctx = cora1
    with pytest.raises(ValueError, match=r"input_nodes holds original id 1000000 outside \[0, 2708\)"):
        DistNeighborLoader(data=stores, num_neighbors=[2], input_nodes=torch.tensor([10**6]),
                           current_ctx=ctx)
    with pytest.raises(ValueError, match="fan-outs must be -1"):
        DistNeighborLoader(data=stores, num_neighbors=[2, -3], current_ctx=ctx)
    with pytest.raises(ValueError, match="num_neighbors names unknown edge type"):
        DistNeighborLoader(data=stores, num_neighbors={("a", "b", "c"): [1]}, current_ctx=ctx)
    with pytest.raises(ValueError, match="time_attr='year' is not a stored"):
        DistNeighborLoader(data=stores, num_neighbors=[2], time_attr="year", current_ctx=ctx)
    with pytest.raises(TypeError, match="data must be a"):
        DistNeighborLoader(data=stores[1], num_neighbors=[2], current_ctx=ctx)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_sise'"):
        DistNeighborLoader(data=stores, num_neighbors=[2], batch_sise=4, current_ctx=ctx)
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_neighbours'"):
        DistLinkNeighborLoader(data=stores, num_neighbors=[2], num_neighbours=[2],
                               current_ctx=ctx)
    with pytest.raises(ValueError, match="batch_size must be"):
        DistNeighborLoader(data=stores, num_neighbors=[2], batch_size=0, current_ctx=ctx)


def test_epoch_plan_pads_by_repeating_whole_batches():
    plan = EpochPlan(num_seeds=5, batch_size=2, num_batches=5, shuffle=False, drop_last=False,
                     seed=0)
    assert [b.tolist() for b in plan.batches(0)] == [[0, 1], [2, 3], [4], [0, 1], [2, 3]]
    empty = EpochPlan(0, 2, 1, False, False, 0)
    with pytest.raises(ValueError, match="no seeds but other ranks do"):
        empty.batches(0)


def test_link_loader_without_negative_sampling(cora1):
    """torch_geometric 2.8's EdgeSamplerInput has no ``neg_sampling``: every batch of a
    loader without negatives used to fail on it."""
    data, stores, ctx = cora1
    seeds = edge_split(stores, ctx)[:, :30]
    labels = torch.arange(30, dtype=torch.float)
    loader = DistLinkNeighborLoader(data=stores, num_neighbors=[3, 2], edge_label_index=seeds,
                                    edge_label=labels, batch_size=10, current_ctx=ctx)
    batches = list(loader)
    assert len(batches) == 3
    for i, batch in enumerate(batches):
        ends = batch.n_id[batch.edge_label_index]
        assert torch.equal(ends, seeds[:, 10 * i:10 * (i + 1)])
        assert torch.equal(batch.edge_label, labels[10 * i:10 * (i + 1)])
    loader.close()


def test_input_nodes_as_a_python_list_are_ids(cora1):
    _, stores, ctx = cora1
    loader = DistNeighborLoader(data=stores, num_neighbors=[2], input_nodes=[5, 7, 11],
                                batch_size=3, current_ctx=ctx)
    batch = next(iter(loader))
    assert batch.n_id[:3].tolist() == [5, 7, 11]
    loader.close()


@pytest.mark.parametrize("fanout", [[10.5, 5], [10.0], ["10"], [True]])
def test_non_integer_fan_outs_are_refused_not_truncated(cora1, fanout):
    _, stores, ctx = cora1
    with pytest.raises(TypeError, match="must be integers"):
        DistNeighborLoader(data=stores, num_neighbors=fanout, input_nodes=[1, 2],
                           batch_size=2, current_ctx=ctx)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(feature_cache="lots"), TypeError, r"feature_cache must be a number of bytes"),
    (dict(feature_cache=-0.5), ValueError, r"feature_cache as a fraction must lie in"),
    (dict(feature_cache=1.5), ValueError, r"feature_cache as a fraction"),
    (dict(feature_cache=-3), ValueError, r"feature_cache as bytes must be >= 0"),
    (dict(feature_cache=True), TypeError, r"feature_cache must be"),
    (dict(current_ctx="ctx"), TypeError, r"current_ctx must be a pyg_dist.DistContext"),
    (dict(shuffle="yes"), TypeError, r"shuffle must be True or False, got str 'yes'"),
    (dict(drop_last=1), TypeError, r"drop_last must be True or False"),
    (dict(replace="no"), TypeError, r"replace must be True or False"),
    (dict(disjoint=None), TypeError, r"disjoint must be True or False"),
    (dict(even_batches="yes"), TypeError, r"even_batches must be True or False"),
    (dict(pin_memory="yes"), TypeError, r"pin_memory must be True or False \(or None\)"),
    (dict(seed="1"), TypeError, r"seed must be an integer"),
    (dict(seed=1.5), TypeError, r"seed must be an integer"),
    (dict(transform="norm"), TypeError, r"transform must be a callable"),
    (dict(device="gpu0"), ValueError, r"device='gpu0' is not a device"),
    (dict(device=[0]), TypeError, r"device must be a torch.device"),
    (dict(time_attr=3), TypeError, r"time_attr must be an attribute name"),
    (dict(weight_attr=b"w"), TypeError, r"weight_attr must be an attribute name"),
    (dict(batch_size="8"), ValueError, r"batch_size must be an integer >= 1"),
    (dict(num_workers=-1), ValueError, r"num_workers must be an integer >= 0"),
])
@pytest.mark.parametrize("loader", ["node", "link"])
def test_bad_loader_arguments_name_the_argument(cora1, loader, kwargs, error, match):
    _, stores, ctx = cora1
    kwargs = {"current_ctx": ctx, **kwargs}
    with pytest.raises(error, match=match):
        if loader == "node":
            DistNeighborLoader(data=stores, num_neighbors=[2], **kwargs)
        else:
            DistLinkNeighborLoader(data=stores, num_neighbors=[2], **kwargs)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(feature_cache="lots"), TypeError, r"feature_cache must be a number of bytes"),
    (dict(feature_cache=-0.5), ValueError, r"feature_cache as a fraction must lie in"),
    (dict(current_ctx="ctx"), TypeError, r"current_ctx must be a pyg_dist.DistContext"),
])
def test_bad_sampler_arguments_name_the_argument(cora1, kwargs, error, match):
    _, stores, ctx = cora1
    kwargs = {"current_ctx": ctx, **kwargs}
    with pytest.raises(error, match=match):
        DistNeighborSampler(stores, num_neighbors=[2], **kwargs)


def test_num_threads_must_be_a_positive_integer(cora1):
    _, stores, ctx = cora1
    loader = DistNeighborLoader(data=stores, num_neighbors=[2], current_ctx=ctx)
    with pytest.raises(ValueError, match="num_threads must be an integer >= 1"):
        with loader.enable_multithreading("2"):
            pass
    loader.close()


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(edge_label=[1, 0]), TypeError, r"edge_label must be a tensor"),
    (dict(edge_label_time=3), TypeError, r"edge_label_time must be a tensor"),
    (dict(neg_sampling_ratio="1"), ValueError, r"neg_sampling_ratio must be a number > 0"),
    (dict(neg_sampling_ratio=-1.0), ValueError, r"neg_sampling_ratio must be a number > 0"),
])
def test_bad_link_seed_arguments_name_the_argument(cora1, kwargs, error, match):
    _, stores, ctx = cora1
    with pytest.raises(error, match=match):
        DistLinkNeighborLoader(data=stores, num_neighbors=[2], current_ctx=ctx, **kwargs)


def test_input_time_must_be_a_tensor(cora1):
    _, stores, ctx = cora1
    with pytest.raises(TypeError, match="input_time must be a tensor"):
        DistNeighborLoader(data=stores, num_neighbors=[2], input_time=[1, 2], current_ctx=ctx)


def test_a_type_nothing_was_sampled_of_has_empty_attributes(tmp_path):
    """As PyG's ``NeighborLoader``: every node type has its attributes in a batch, with
    zero rows when no node of it was sampled, and every edge type its edge attributes
    (here: institutions are never reached from papers in one hop)."""
    from pyg_dist.datasets import hetero_community_graph

    data = hetero_community_graph(60, avg_degree=3, feat_dim=5, seed=2)
    Partitioner(data, 1, tmp_path, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(tmp_path, 0),
              LocalGraphStore.from_partition(tmp_path, 0))
    loader = DistNeighborLoader(data=stores, num_neighbors=[2], batch_size=8,
                                input_nodes=("paper", torch.arange(8)),
                                current_ctx=DistContext(rank=0, world_size=1))
    batch = next(iter(loader))
    assert batch["institution"].num_nodes == 0
    x = batch["institution"].x
    assert x.shape == (0, data["institution"].x.size(1)) and x.dtype == data["institution"].x.dtype
    employs = batch["institution", "employs", "author"]
    assert employs.edge_index.shape == (2, 0)
    writes = batch["author", "writes", "paper"]
    assert writes.edge_attr.size(1) == data["author", "writes", "paper"].edge_attr.size(1)
    assert "x" in batch["author"] and batch["author"].x.size(0) == batch["author"].num_nodes
    loader.close()


def test_a_sampler_keeps_freed_memory_for_its_batches(cora1, monkeypatch):
    """Every process that samples (trainer, sampler worker, DistGraph) builds a
    DistNeighborSampler, which asks malloc to keep freed blocks
    (tests/sampler/test_malloc.py: what that does to page faults)."""
    import pyg_dist.sampler._neighbor_sampler as module

    calls = []
    monkeypatch.setattr(module, "keep_freed_memory", lambda: calls.append(1) or 64)
    _, stores, ctx = cora1
    DistNeighborSampler(stores, num_neighbors=[2], current_ctx=ctx)
    assert calls == [1]


def test_pygs_loader_attributes_sampler_channel_and_repr(cora1):
    """PyG's loaders expose ``dist_sampler``, a ``channel`` that is empty once a pass
    is handed out, and a repr naming the process."""
    import os
    _, stores, ctx = cora1
    loader = DistNeighborLoader(data=stores, num_neighbors=[2], input_nodes=[5, 7, 11, 13],
                                batch_size=2, current_ctx=ctx)
    assert isinstance(loader.dist_sampler, DistNeighborSampler)
    assert loader.dist_sampler is loader.sampler
    assert str(loader).startswith("DistNeighborLoader") and str(os.getpid()) in str(loader)
    assert loader.channel.empty()  # no pass started
    it = iter(loader)
    next(it)
    assert not loader.channel.empty()  # one batch still to come
    next(it)
    assert loader.channel.empty()
    loader.close()


def test_init_rpc_takes_pygs_keywords(cora1):
    """``init_rpc(current_ctx=..., master_addr=..., master_port=...)`` as PyG's scripts
    call it; a keyword neither library has is a TypeError."""
    from pyg_dist import init_rpc
    _, stores, ctx = cora1
    shutdown_rpc()  # the loaders above joined
    with pytest.raises(TypeError, match="unexpected keyword"):
        init_rpc(current_ctx=ctx, data=stores, master_prot=1)
    try:
        group = init_rpc(current_ctx=ctx, data=stores, master_addr="localhost",
                         master_port=29511, num_rpc_threads=4)
        assert group.part == 0 and group.ctx.rank == 0
    finally:
        shutdown_rpc()
