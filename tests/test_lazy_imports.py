"""``import pyg_dist`` and the commands that need no PyG class (``pyg-dist-checkpoint``,
``pyg-dist-verify``) leave torch_geometric unimported: it costs seconds of CPU per fresh
interpreter (torch._dynamo, pandas). The public names still resolve on first use."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECK = """
import sys
import pyg_dist, pyg_dist.cli.checkpoint, pyg_dist.cli.verify
loaded = sorted(m for m in ("torch_geometric", "pyg_dist.loader", "pyg_dist.embedding")
                if m in sys.modules)
print("loaded:", loaded)
assert pyg_dist.checkpoint.save is not None  # a subpackage, as before
print("names:", all(getattr(pyg_dist, name) is not None for name in pyg_dist.__all__))
print("after:", "torch_geometric" in sys.modules)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_package_and_checkpoint_commands_import_no_torch_geometric():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         env=env, timeout=100, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "loaded: []" in out.stdout, out.stdout
    assert "names: True" in out.stdout and "after: True" in out.stdout, out.stdout
