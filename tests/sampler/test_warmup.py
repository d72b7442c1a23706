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
