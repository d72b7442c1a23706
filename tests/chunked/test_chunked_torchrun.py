"""Multi-machine partitioning (``pyg-dist-partition`` under ``torchrun``) reads chunked
folders with the same checks, and passes ``--allow-external-paths`` through."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List, Tuple

import pytest

from pyg_dist.chunked import write_chunked
from pyg_dist.datasets import community_graph
from tests.support.scripts import run_script

REPO = Path(__file__).resolve().parents[2]
#: the canary's content; error messages that quote files show their first bytes, so the
#: check is for its first six characters (no path or message holds them)
CANARY = "QZJXWK-canary-content-never-print-me"
LEAK = CANARY[:6]
EDGES = "_N:_E:_N"


def _torchrun(args: List[str], timeout: float) -> Tuple[int, str]:
    """Two ranks of ``pyg-dist-partition`` as ``torchrun --nproc-per-node=2`` runs them
    (forked from a warm fork server: :func:`tests.support.scripts.run_script`)."""
    run = run_script("pyg_dist.cli.partition", args, 2, module=True, timeout=timeout,
                     cwd=REPO, extra_env={"OMP_NUM_THREADS": "1", "PYG_DIST_RPC_TIMEOUT": "20"})
    if run.timed_out:
        pytest.fail(run.describe())
    return run.returncode, run.output


def _list_edge_chunk(folder: Path, path: str) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    meta["edges"][EDGES]["data"][1] = path
    (folder / "metadata.json").write_text(json.dumps(meta))


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_torchrun_refuses_a_path_out_and_allows_it_on_request(tmp_path: Path) -> None:
    folder = tmp_path / "graph"
    write_chunked(community_graph(200, 4.0, 3, 3, seed=0), folder, chunk_size=200)
    rel = json.loads((folder / "metadata.json").read_text())["edges"][EDGES]["data"][1]
    (tmp_path / "canary.npy").write_text(CANARY + "\n")
    _list_edge_chunk(folder, "../canary.npy")
    args = ["--input", str(folder), "--num-parts", "2", "--memory-budget", "4MB", "--quiet"]
    code, out = _torchrun(args + ["--out", str(tmp_path / "refused")], 180)
    assert code != 0 and LEAK not in out, out[-8000:]
    # both ranks refuse (their stderr lines may interleave on one line: count, not split)
    errors = out.split("pyg-dist-partition: error:")[1:]
    assert len(errors) == 2 and all("leads outside" in e for e in errors), out[-8000:]
    assert not (tmp_path / "refused").exists()

    shutil.move(str(folder / rel), tmp_path / "outside.npy")  # a real chunk, listed absolutely
    _list_edge_chunk(folder, str(tmp_path / "outside.npy"))
    code, out = _torchrun(args + ["--out", str(tmp_path / "parts"), "--allow-external-paths"],
                          180)
    assert code == 0, out[-8000:]
    assert (tmp_path / "parts" / "META.json").is_file()
