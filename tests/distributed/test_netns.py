"""Two machines with distinct addresses (network namespaces), not 127.0.0.1.

Each machine runs its own ``torchrun`` with ``--master-addr`` the first machine's
198.18.0.1 address, while its host name still resolves to 127.0.0.1: pyg_dist must
pick the interface that reaches the master for gloo and TensorPipe by itself. The job
trains and gives exactly the results of the same job over loopback (same seed): the
same batches, sampled over RPC between the machines instead of read directly from the
same-machine partition files. The loopback job's ranks are forked from the test's warm fork
server (:func:`tests.support.scripts.run_script`), the machines' are fresh interpreters
under torchrun: a seeded job gives the same results either way (the kernels' warm-up
runs in a fresh rank, in the fork server for a forked one).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyg_dist import Partitioner
from pyg_dist.testing import free_port
from tests.support import instrument
from tests.support.netns import EmulatedCluster, remove_leftovers, unavailable
from tests.support.scripts import run_script

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "benchmarks" / "trainers" / "node_classification.py"
INSTRUMENT = Path(instrument.__file__)  # reports the partitions read directly from files
REASON = unavailable()
pytestmark = [pytest.mark.multiprocess, pytest.mark.serial,  # rates over a shaped link
              pytest.mark.skipif(REASON is not None, reason=f"emulated cluster: {REASON}")]
ARGS = ["--epochs", "2", "--batch-size", "64", "--seed", "3", "--log-every", "0"]


@pytest.fixture(scope="module")
def parts(cora, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("netns") / "cora2"
    Partitioner(cora, 2, root, progress=False).generate()
    return root


def _torchrun(nnodes: int, node_rank: int, nproc: int, master: str, port: int,
              root: Path) -> list:
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
            f"--node-rank={node_rank}", f"--nproc-per-node={nproc}", f"--master-addr={master}",
            f"--master-port={port}", "--max-restarts=0", str(INSTRUMENT), "--", str(EXAMPLE),
            "--partition-dir", str(root), *ARGS]


def _result(out: str) -> dict:
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert lines, out[-6000:]
    return json.loads(lines[-1])


ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _run_machines(cluster: EmulatedCluster, commands: list) -> list:
    """Runs ``commands[m]`` on machine ``m``; their outputs, once every one exited 0."""
    procs = [cluster.popen(m, argv, env=ENV, cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True) for m, argv in enumerate(commands)]
    try:
        outs = [p.communicate(timeout=150)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-6000:]
    return outs


@pytest.mark.timeout(360)
def test_two_namespaces_train_like_loopback(parts: Path) -> None:
    remove_leftovers()
    loop = run_script(INSTRUMENT, ["--", str(EXAMPLE), "--partition-dir", str(parts), *ARGS],
                      2, timeout=150, cwd=REPO, extra_env=ENV)
    assert loop.returncode == 0, loop.describe()
    with EmulatedCluster(2) as cluster:
        port = free_port()
        outs = _run_machines(cluster, [_torchrun(2, m, 1, cluster.address(0), port, parts)
                                       for m in (0, 1)])
    ours, ref = _result(outs[0]), _result(loop.output)
    assert ours["world_size"] == ref["world_size"] == 2
    direct = [instrument.read_reports(out)[0]["direct_parts"] for out in (loop.output, outs[0])]
    assert direct == [[1], []]  # loopback reads the other partition's files; 2 machines not
    for key in ("train_loss", "train_acc", "val_acc", "test_acc", "batches_per_epoch"):
        assert ours[key] == ref[key], (key, ours, ref)
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout.split() if n in cluster.namespaces]


@pytest.mark.timeout(360)
def test_remote_features_cross_the_rate_limited_link(parts: Path) -> None:
    """At 20 Mb/s, fetching the other machine's features takes at least their bytes at
    that rate: TensorPipe must not move them through this host's memory instead (it
    did, 100x faster than the link, before ``PYG_DIST_RPC_NETWORK_ONLY``)."""
    remove_leftovers()
    script = REPO / "tests" / "distributed" / "netns_fetch.py"
    with EmulatedCluster(2, "20mbit") as cluster:
        port = free_port()
        outs = _run_machines(cluster, [
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={m}",
             "--nproc-per-node=1", f"--master-addr={cluster.address(0)}",
             f"--master-port={port}", str(script), str(parts)] for m in (0, 1)])
    for out in outs:
        got = _result(out)
        at_link_rate = got["bytes"] * 8 / 20e6
        assert got["bytes"] > 4e6 and got["seconds"] >= 0.8 * at_link_rate, got
