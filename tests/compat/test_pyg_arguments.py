"""``torch_geometric.distributed``'s constructor arguments: ``DistContext`` positionally,
``worker_name``, ``DistNeighborSampler`` in PyG's argument order with PyG's keywords,
and loaders meeting at PyG's ``master_addr``/``master_port`` without a process group."""
from __future__ import annotations

import os
import socket
import warnings

import pytest
import torch
import torch.distributed as dist
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist import (DistContext, DistNeighborLoader, DistNeighborSampler, LocalFeatureStore,
                      LocalGraphStore, Partitioner, shutdown_rpc)
from pyg_dist.datasets import community_graph
from pyg_dist.loader._compat import rendezvous_context
from pyg_dist.rpc import _runtime as runtime
from pyg_dist.sampler import _compat as compat
from pyg_dist.testing import free_port, run_ranks
from pyg_dist.testing import encode_ids


@pytest.fixture(scope="module")
def one_part(tmp_path_factory: pytest.TempPathFactory):
    data = encode_ids(community_graph(80, avg_degree=3, feat_dim=2, num_classes=2, seed=3))
    root = tmp_path_factory.mktemp("pyg_args") / "one"
    Partitioner(data, 1, root, progress=False).generate()
    yield root
    shutdown_rpc()


def _stores(root, part: int = 0):
    return LocalFeatureStore.from_partition(root, part), LocalGraphStore.from_partition(root, part)


def test_dist_context_positional_as_pyg() -> None:
    ctx = DistContext(1, 1, 2, 2, "dist-sampler-test")
    assert (ctx.rank, ctx.global_rank, ctx.world_size, ctx.global_world_size) == (1, 1, 2, 2)
    assert ctx.worker_name == "dist-sampler-test-1"
    with pytest.raises(ValueError, match="global_rank=2 differs from rank=0"):
        DistContext(0, 2)  # pyg_dist's old order (rank, world_size) is told apart


def test_sampler_takes_pygs_order_and_keywords(one_part, monkeypatch) -> None:
    monkeypatch.setattr(compat, "_WARNED", set())
    ctx = DistContext(0, 0, 1, 1, "dist-sampler-test")
    data = _stores(one_part)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = DistNeighborSampler(ctx, data, [2, 1], channel=None, concurrency=4,
                                      device=torch.device("cpu"), shuffle=False,
                                      rpc_worker_names={}, disjoint=True)
    assert sorted(str(w.message).split("=")[0].split()[-1] for w in caught) == [
        "channel", "concurrency", "device", "rpc_worker_names", "shuffle"]
    assert sampler.config.disjoint and sampler.features is data[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process, not per sampler
        DistNeighborSampler(data=data, current_ctx=ctx, num_neighbors=[2], shuffle=True)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([3, 7])))
    assert out.node[:2].tolist() == [3, 7]  # original ids in and out
    with pytest.raises(TypeError, match="unexpected keyword argument 'shufle'"):
        DistNeighborSampler(ctx, data, [2], shufle=False)


def test_stores_built_in_memory_need_a_book_and_each_other(one_part) -> None:
    fs, gs = _stores(one_part)
    memory = LocalFeatureStore.from_data(torch.arange(4), torch.randn(4, 2))
    with pytest.raises(ValueError, match="built in memory .* from_partition"):
        DistNeighborSampler((memory, gs), [2], current_ctx=DistContext())
    with pytest.raises(ValueError, match="built in memory but the feature store"):
        DistNeighborSampler((fs, LocalGraphStore.from_data(None, torch.zeros(2, 1,
                            dtype=torch.long), 2)), [2], current_ctx=DistContext())
    with pytest.raises(ValueError, match="need a partition book.*node_pb"):
        DistNeighborSampler((memory, LocalGraphStore.from_data(None, torch.zeros(
            2, 1, dtype=torch.long), 4)), [2], current_ctx=DistContext())


def test_rendezvous_context_uses_pygs_address_without_a_group(monkeypatch) -> None:
    ctx = DistContext(rank=0, world_size=2)
    # an earlier test's group or RPC: this test is about a process with neither
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime, "is_initialized", lambda: False)
    moved = rendezvous_context(ctx, {"master_addr": "localhost", "master_port": "12345"})
    assert (moved.master_addr, moved.master_port) == ("localhost", 12345)
    assert rendezvous_context(ctx, {}) is ctx
    with pytest.raises(ValueError, match="master_port must be a port number"):
        rendezvous_context(ctx, {"master_port": "http"})
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # a group: it decides
    assert rendezvous_context(ctx, {"master_port": 12345}) is ctx


def _meet_at_pygs_port(root: str, port: int) -> list:
    """A PyG-style rank: no process group, a DistContext built positionally, the loader
    told where to meet (torchrun's variables are unset)."""
    rank = int(os.environ["RANK"])
    ctx = DistContext(rank, rank, 2, 2, "pyg-style", rpc_timeout=60)
    loader = DistNeighborLoader(_stores(root, rank), [2], input_nodes=torch.arange(4) + 4 * rank,
                                batch_size=2, current_ctx=ctx, master_addr="127.0.0.1",
                                master_port=port, channel=None)
    ids = [batch.n_id[:batch.batch_size].tolist() for batch in loader]
    loader.close()
    shutdown_rpc()
    return ids


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_loader_meets_at_pygs_master_port(tmp_path) -> None:
    data = encode_ids(community_graph(80, avg_degree=3, feat_dim=2, num_classes=2, seed=3))
    Partitioner(data, 2, tmp_path / "two", progress=False).generate()
    unset = {"MASTER_ADDR": None, "MASTER_PORT": None, "TORCHELASTIC_USE_AGENT_STORE": None}
    with socket.socket() as default:  # torch's default rendezvous port is taken: the
        try:                          # ranks must meet where the loader is told to
            default.bind(("127.0.0.1", 29500))
            default.listen()
        except OSError:
            pass  # taken already by something else
        out = run_ranks(_meet_at_pygs_port, 2, str(tmp_path / "two"), free_port(),
                        timeout=150, rank_env={0: unset, 1: unset})
    assert out == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
