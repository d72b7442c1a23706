"""``loop.rank_ordered_gradients``: DDP's gradients become the rank-ordered mean of the
ranks' own gradients (bit for bit), the same as DDP's all-reduce up to rounding, on 2 and
3 ranks. (That a 3-rank job restarted from a checkpoint then trains bit for bit as the
run it continues is the 3-rank kill walk's check: ``test_checkpoint_kills_three.py``.)"""
from __future__ import annotations

import os

import pytest
import torch

from pyg_dist.testing import run_ranks

pytestmark = pytest.mark.multiprocess


def _grads(ordered: bool):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from pyg_dist import DistContext, init_process_group, loop

    ctx = DistContext.from_env()
    init_process_group("gloo", ctx)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(33, 17), torch.nn.ReLU(), torch.nn.Linear(17, 5))
    ddp = DistributedDataParallel(model)
    if ordered:
        assert loop.rank_ordered_gradients(ddp) is ddp
    g = torch.Generator().manual_seed(100 + int(os.environ["RANK"]))
    x = torch.randn(64, 33, generator=g) * (10.0 ** int(os.environ["RANK"]))  # unlike scales
    local = torch.autograd.grad(model(x).pow(2).mean(), list(model.parameters()))
    ddp(x).pow(2).mean().backward()
    reduced = [p.grad.clone() for p in model.parameters()]
    gathered = []
    for t in local:
        parts = [torch.empty_like(t) for _ in range(ctx.world_size)]
        dist.all_gather(parts, t)
        gathered.append(parts)
    del ddp
    dist.destroy_process_group()
    return reduced, gathered


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 3])
def test_gradients_are_the_rank_ordered_mean(world):
    ordered = run_ranks(_grads, world, True, timeout=100)
    plain = run_ranks(_grads, world, False, timeout=100)
    for (reduced, gathered), (ddp_reduced, _) in zip(ordered, plain):
        for got, parts, ddp_got in zip(reduced, gathered, ddp_reduced):
            want = parts[0].clone()
            for part in parts[1:]:
                want += part
            assert torch.equal(got, want / world)  # bit for bit, in rank order
            assert torch.allclose(got, ddp_got, rtol=1e-5, atol=1e-6)  # DDP's mean
    assert all(torch.equal(a, b) for a, b in zip(ordered[0][0], ordered[-1][0]))  # every rank
