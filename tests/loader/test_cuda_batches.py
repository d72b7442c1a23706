"""Batches moved to a GPU (``device="cuda"``, pinned by default): with no sampler workers
the rows are gathered straight into reused page-locked buffers, so each batch must still
equal the CPU loader's after its buffers were reused for later batches (the loader holds
a batch's pinned tensors until their non-blocking copy has run). Skips without CUDA: it
runs on a GPU machine."""
from __future__ import annotations

import pytest
import torch

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      Partitioner, node_split, shutdown_rpc)
from pyg_dist.testing._graphs import encode_ids

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def cora_one_part(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora_cuda")
    Partitioner(encode_ids(cora), 1, root, progress=False).generate()
    yield (LocalFeatureStore.from_partition(root, 0),
           LocalGraphStore.from_partition(root, 0)), DistContext(rank=0, world_size=1)
    shutdown_rpc()


@pytest.mark.parametrize("pin", [True, False])
def test_cuda_batches_equal_cpu_batches(cora_one_part, pin):
    stores, ctx = cora_one_part
    kw = dict(data=stores, num_neighbors=[10, 5], input_nodes=node_split(stores, "train", ctx),
              batch_size=16, shuffle=True, seed=3, current_ctx=ctx)
    cpu = DistNeighborLoader(**kw)
    gpu = DistNeighborLoader(**kw, device="cuda", pin_memory=pin)
    pool = gpu.sampler.fetcher.outputs
    assert pool.pinned == pin and gpu.sampler is not cpu.sampler
    expected, got = [], []
    for epoch in range(3):
        cpu.set_epoch(epoch)
        gpu.set_epoch(epoch)
        expected += list(cpu)
        got += list(gpu)
    assert len(got) == len(expected) == 3 * len(cpu)
    if pin:
        assert pool.reused > 0 and got[0].x.is_cuda
    for a, b in zip(expected, got):  # compared after every buffer was reused
        for key in ("x", "y", "n_id", "edge_index", "e_id"):
            assert torch.equal(a[key], b[key].cpu()), key
    cpu.close()
    gpu.close()
