"""``loop.finish`` prints the job's JSON line last: after every rank has left RPC, so
what a peer writes while it shuts down (TensorPipe logs a benign "pipe closed" when the
leader hangs up first) never lands after the result."""
from __future__ import annotations

import json
import textwrap

import pytest

from tests.support.scripts import run_script

pytestmark = pytest.mark.multiprocess

SCRIPT = textwrap.dedent("""
    import sys, time
    from pyg_dist import loop

    ctx, _ = loop.setup()
    if ctx.rank == 1:  # a peer still shutting down (and logging) when rank 0 is done
        def slow_shutdown(graceful=True):
            time.sleep(1.0)
            sys.stderr.write("rank 1 left RPC\\n")
            sys.stderr.flush()
        loop.shutdown_rpc = slow_shutdown
    loop.finish(ctx, results={"rank": ctx.rank, "world_size": ctx.world_size})
""")


@pytest.mark.timeout(90)
def test_the_json_line_comes_after_every_rank_left_rpc(tmp_path):
    script = tmp_path / "finish.py"
    script.write_text(SCRIPT)
    job = run_script(script, nproc=2, timeout=60)
    assert job.returncode == 0, job.describe()
    lines = job.output.rstrip().splitlines()
    assert "rank 1 left RPC" in lines, job.describe()
    assert json.loads(lines[-1]) == {"rank": 0, "world_size": 2}, job.describe()
