"""keep_freed_memory(): a sampling process reuses freed blocks instead of faulting in
fresh pages for every batch's arrays."""
import ctypes.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from pyg_dist._madvise import KEEP_ENV, keep_freed_memory

GLIBC = sys.platform.startswith("linux") and "libc.so.6" in (ctypes.util.find_library("c") or "")

# Page faults of a "batch" (four 6 MB arrays, as one hop's positions, neighbours, ids
# and counts), allocated, touched and freed, once it ran a few times, before and after
# keep_freed_memory() (in a fresh interpreter: mallopt cannot be undone).
FAULTS = textwrap.dedent("""
    import json, resource
    import numpy as np
    from pyg_dist._madvise import keep_freed_memory

    def batch_faults():
        for _ in range(3):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            arrays = [np.ones(6 << 17) for _ in range(4)]
            del arrays
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    default = batch_faults()
    kept = keep_freed_memory()
    print(json.dumps({"default": default, "kept_mb": kept, "kept": batch_faults()}))
""")


@pytest.mark.multiprocess
@pytest.mark.skipif(not GLIBC, reason="mallopt(3) thresholds are glibc's")
@pytest.mark.parametrize("keep", [64, 0])
def test_freed_batch_arrays_are_reused_without_page_faults(keep):
    done = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True,
                          timeout=120, env={**os.environ, KEEP_ENV: str(keep)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kept_mb"] == keep
    assert got["default"] > 0, got  # glibc maps such blocks afresh for every batch
    if keep:
        assert got["kept"] * 10 <= got["default"], got  # now it reuses the freed ones
    else:
        assert got["kept"] * 2 >= got["default"], got  # 0: malloc's defaults stay


@pytest.mark.parametrize("value", ["abc", "-1", "4096", "1.5"])
def test_a_bad_keep_value_is_named(monkeypatch, value):
    monkeypatch.setenv(KEEP_ENV, value)
    with pytest.raises(ValueError, match=KEEP_ENV):
        keep_freed_memory()
