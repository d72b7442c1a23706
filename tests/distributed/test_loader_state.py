"""Loader positions with 2 ranks: each rank stops after k batches of an epoch, a fresh
loader on every rank loads that rank's state, and the union of the batches equals an
uninterrupted epoch's exactly (input ids and sampled ``n_id``, random fan-outs, remote
hops included), with the sampling in-process or in a sampler worker."""
from __future__ import annotations

from typing import Dict, List

import pytest
import torch.distributed as dist

from pyg_dist import DistNeighborLoader, Partitioner, node_split, shutdown_rpc
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids
from test_loader import _ddp_step, _open

pytestmark = pytest.mark.multiprocess  # every test here starts processes


def _take(loader, ctx, k: int = -1) -> List[List[List[int]]]:
    out = []
    for batch in loader:
        _ddp_step(ctx)
        out.append([batch.input_id.tolist(), batch.n_id.tolist()])
        if len(out) == k:
            break
    return out


def _job(root: str, num_workers: int) -> Dict:
    ctx, data = _open(root)
    ids = node_split(data, "train", ctx)
    if ctx.rank == 1:
        ids = ids[:40]  # uneven: rank 1 pads by repeating its own batches

    def make(workers: int = 0) -> DistNeighborLoader:
        return DistNeighborLoader(data=data, num_neighbors=[5, 3], input_nodes=ids,
                                  batch_size=16, shuffle=True, seed=11, concurrency=3,
                                  num_workers=workers, current_ctx=ctx)

    ref = make()
    full = [_take(ref, ctx) for _ in range(2)]
    ref.close()
    first = make(num_workers)
    head = _take(first, ctx, 3)
    state = first.state_dict()
    first.close()
    resumed = make(num_workers)
    resumed.load_state_dict(state)
    tail = _take(resumed, ctx)
    after = resumed.state_dict()
    epoch1 = _take(resumed, ctx)
    try:  # another rank's state is refused
        other = [None, None]
        dist.all_gather_object(other, state)
        resumed.load_state_dict(other[1 - ctx.rank])
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    resumed.close()
    shutdown_rpc()
    return {"full": full, "head": head, "tail": tail, "epoch1": epoch1, "state": state,
            "after": after, "refused": refused}


@pytest.fixture(scope="module")
def cora2_state(cora, tmp_path_factory):
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora2_state")
    Partitioner(data, 2, root, seed=0, progress=False).generate()
    return root


@pytest.mark.timeout(300)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_two_ranks_resume_exactly(cora2_state, num_workers):
    out = run_ranks(_job, 2, str(cora2_state), num_workers, timeout=260)
    for rank, o in enumerate(out):
        assert (o["state"]["epoch"], o["state"]["batch"]) == (0, 3)
        assert o["head"] + o["tail"] == o["full"][0], f"rank {rank}: epoch 0 differs"
        assert (o["after"]["epoch"], o["after"]["batch"]) == (1, 0)
        assert o["epoch1"] == o["full"][1], f"rank {rank}: epoch 1 differs"
        assert "rank" in o["refused"] and "world size" in o["refused"]
    assert len(out[0]["full"][0]) == len(out[1]["full"][0]) > 3
    seeds = [i for b in out[1]["full"][0] for i in b[0]]
    assert sorted(set(seeds)) == list(range(40))  # rank 1 pads with its own seeds
