"""warm_up(): after it, a representative workload compiles nothing more."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ENTRY_KERNELS = {
    "pyg_dist.sampler._sample_kernels._uniform_sample": 4,   # int64/int32 indices and id tables
    "pyg_dist.sampler._sample_kernels._filtered_fill": 1,    # weighted and temporal
    "pyg_dist.rpc._routing._group_by_owner": 1,
    "pyg_dist.sampler._gather._copy_rows": 4,           # int64, int32, byte words; int32 ids
    "pyg_dist.sampler._node_index._insert": 1,
    "pyg_dist.sampler._node_index._lookup": 1,
}


@pytest.mark.multiprocess
def test_no_kernel_compiles_after_warm_up():
    """In a fresh interpreter: warm_up(), then sampling (homo and hetero, int64 and
    int32 indices, uniform, replacement, full, weighted, temporal uniform and last,
    disjoint) and feature fetching (split requests, deduplicated or not). No numba
    dispatcher of the library gains a signature after warm_up()."""
    done = subprocess.run([sys.executable, str(HERE / "warm_workload.py")],
                          capture_output=True, text=True, timeout=280, cwd=HERE.parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["new"] == {}, f"compiled after warm_up: {report['new']}"
    for name, count in ENTRY_KERNELS.items():
        assert report["warmed"].get(name, 0) >= count, (name, report["warmed"])
    assert report["again_returned"] == 0.0 and report["again_s"] < 0.01


@pytest.mark.parametrize("labor", [False, True])
def test_warm_up_leaves_torch_generator_as_it_was(monkeypatch, labor):
    """A job seeds torch, then joins RPC (which warms the kernels up), then builds its
    model: warming up must not draw from torch's generator, or a fresh interpreter
    (torchrun) and a process forked from a warm one initialise different models."""
    from pyg_dist.sampler import _warmup

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_warmup, "_DONE", set())  # as in a process that never warmed up
    torch.manual_seed(7)
    assert _warmup.warm_up(labor=labor) > 0.0  # it ran every part
    after_warm_up = torch.rand(4)
    torch.manual_seed(7)
    assert torch.equal(torch.rand(4), after_warm_up)
