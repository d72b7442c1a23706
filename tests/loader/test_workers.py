"""Sampler worker pools and what a trainer leaves behind when it is stopped and killed
(as torchrun does with a SIGSTOPped rank): no named semaphores in ``/dev/shm``."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest
import torch

SHM = Path("/dev/shm")

TRAINER = """
import os, signal
from pyg_dist.loader._workers import WorkerPool
pool = WorkerPool(1, lambda i: None, 2)  # the worker fails at once: only its pipes matter
print("started", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def _semaphores() -> Dict[int, str]:
    """Named semaphores in ``/dev/shm`` by inode."""
    found = {}
    for path in SHM.glob("sem.*"):
        try:
            found[path.stat().st_ino] = path.name
        except OSError:  # removed meanwhile
            continue
    return found


def _mapped_by(pids: Set[int]) -> Set[int]:
    """Inodes of the semaphore files the processes ``pids`` have mapped. Named
    semaphores are machine-wide, so other jobs' come and go meanwhile and only these are
    the job's; glibc maps one under a temporary name before linking it to its own, so
    the inode, not the name, identifies it."""
    inodes = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
        except OSError:  # gone meanwhile
            continue
        inodes.update(int(line.split()[4]) for line in lines if "/dev/shm/sem." in line)
    return inodes


def _group(pgid: int) -> Set[int]:
    """The processes of process group ``pgid`` (a trainer, its workers and helpers)."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            pids.add(int(stat.parent.name))
    return pids


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm")
def test_a_stopped_and_killed_trainer_leaves_no_semaphores():
    """Before, every stopped job with one sampler worker left 6 ``sem.mp-*`` files (the
    three of each multiprocessing queue), since only a clean exit unlinks them."""
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert trainer.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 30
        while not _stopped(trainer.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _stopped(trainer.pid)
        time.sleep(1.0)  # the worker has started (and failed) by now
        job = _mapped_by(_group(trainer.pid))
    finally:
        os.killpg(trainer.pid, signal.SIGKILL)  # what torchrun does after its grace
        trainer.communicate()
    deadline = time.monotonic() + 10
    while _group(trainer.pid) and time.monotonic() < deadline:  # the group goes
        time.sleep(0.1)
    leaked = sorted(name for inode, name in _semaphores().items() if inode in job)
    assert leaked == [], f"the killed job left {len(leaked)} semaphores: {leaked}"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _epoch(loader) -> Tuple[List[Tuple[torch.Tensor, torch.Tensor]], Set[int]]:
    """An epoch's batches and the parent processes of the loader's workers."""
    out = [(batch.input_id.clone(), batch.n_id.clone()) for batch in loader]
    parents = {_parent(proc.pid) for proc in loader._pool.procs}
    loader.close()
    return out, parents


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_workers_fork_from_one_server_per_trainer_or_spawn_when_asked(cora, tmp_path,
                                                                      monkeypatch):
    """Every worker of every loader of a trainer is forked from one server (not the
    trainer, not a fresh interpreter each); ``PYG_DIST_WORKER_START=spawn`` makes them
    the trainer's own children again; the batches are the same either way."""
    from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore,
                          LocalGraphStore, Partitioner, node_split, shutdown_rpc)
    from pyg_dist.testing import encode_ids

    Partitioner(encode_ids(cora), 1, tmp_path, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(tmp_path, 0),
              LocalGraphStore.from_partition(tmp_path, 0))
    ctx = DistContext(rank=0, world_size=1)

    def loader(workers: int = 2) -> DistNeighborLoader:
        return DistNeighborLoader(data=stores, num_neighbors=[4, 3], batch_size=64,
                                  input_nodes=node_split(stores, "train", ctx), seed=3,
                                  shuffle=True, num_workers=workers, current_ctx=ctx)
    try:
        monkeypatch.setenv("PYG_DIST_WORKER_START", "forkserver")
        forked = [_epoch(loader()) for _ in range(2)]
        monkeypatch.setenv("PYG_DIST_WORKER_START", "spawn")
        spawned = _epoch(loader(1))  # a fresh interpreter: one is enough
        monkeypatch.setenv("PYG_DIST_WORKER_START", "fork")
        with pytest.raises(ValueError, match="PYG_DIST_WORKER_START"):
            _epoch(loader())
    finally:
        shutdown_rpc()
    servers = forked[0][1] | forked[1][1]
    assert len(servers) == 1 and os.getpid() not in servers, servers
    assert spawned[1] == {os.getpid()}
    for batches, _ in (*forked, spawned):
        assert len(batches) == len(forked[0][0]) > 1
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                   for a, b in zip(batches, forked[0][0]))
