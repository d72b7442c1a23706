"""Sampler worker pools and what a trainer leaves behind when it is stopped and killed
(as torchrun does with a SIGSTOPped rank): no named semaphores in ``/dev/shm``."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Set

import pytest

SHM = Path("/dev/shm")

TRAINER = """
import os, signal
from pyg_dist.loader.workers import WorkerPool
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
