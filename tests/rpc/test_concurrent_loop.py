"""``ConcurrentEventLoop``: ``torch_geometric.distributed``'s loop for driving a sampler
by hand (start_loop, run_task, add_task, wait_all), with errors that surface instead of
waits that never end."""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from pyg_dist.event_loop import ConcurrentEventLoop
from pyg_dist.rpc import ConcurrentEventLoop as RpcConcurrentEventLoop


async def _double(x: int) -> int:
    await asyncio.sleep(0.01)
    return 2 * x


async def _fail() -> None:
    raise KeyError("boom")


def test_pygs_module_name_and_run_task():
    assert ConcurrentEventLoop is RpcConcurrentEventLoop
    loop = ConcurrentEventLoop(2)
    loop.start_loop()
    loop.start_loop()  # a second call does nothing, as PyG's
    try:
        assert loop.run_task(coro=_double(21)) == 42
        with pytest.raises(KeyError, match="boom"):  # raised, not only logged
            loop.run_task(coro=_fail())
        assert loop.run_task(coro=_double(1)) == 2  # the slot of the failed task is free
    finally:
        loop.close()


def test_run_task_before_start_loop_raises_instead_of_waiting():
    loop = ConcurrentEventLoop(1)
    coro = _double(1)
    with pytest.raises(RuntimeError, match=r"not started: call start_loop\(\) first"):
        loop.run_task(coro)
    assert coro.cr_frame is None  # closed: no "never awaited" warning
    loop.close()  # a loop never started closes too
    assert loop.loop.is_closed()
    with pytest.raises(RuntimeError, match="closed"):
        loop.run_task(_double(1))


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_concurrency_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="concurrency must be a positive integer"):
        ConcurrentEventLoop(bad)


def test_at_most_concurrency_tasks_run_at_once_and_wait_all():
    loop = ConcurrentEventLoop(2)
    loop.start_loop()
    running, peak, lock = [0], [0], threading.Lock()
    results = []

    async def task(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.05)
        with lock:
            running[0] -= 1
        return i

    try:
        futures = [loop.add_task(task(i), callback=results.append) for i in range(6)]
        loop.wait_all(timeout=10)
        assert sorted(results) == list(range(6)) and peak[0] == 2
        assert [f.result() for f in futures] == list(range(6))
    finally:
        loop.close()


def test_add_task_failures_are_kept_and_logged(caplog):
    loop = ConcurrentEventLoop(1)
    loop.start_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="pyg_dist"):
            future = loop.add_task(_fail())
            loop.wait_all(timeout=10)
            with pytest.raises(KeyError):
                future.result()
            loop.add_task(_double(1), callback=lambda _: 1 / 0)
            loop.wait_all(timeout=10)
        messages = [r.getMessage() for r in caplog.records]
        assert any("task failed" in m and "boom" in m for m in messages), messages
        assert any("callback failed" in m for m in messages), messages
    finally:
        loop.close()


def test_wait_all_times_out_and_run_task_refuses_its_own_loop():
    loop = ConcurrentEventLoop(1)
    loop.start_loop()
    release = threading.Event()

    async def blocked() -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)

    async def nested() -> None:
        loop.run_task(_double(1))

    try:
        loop.add_task(blocked())
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="still running"):
            loop.wait_all(timeout=0.2)
        assert time.monotonic() - start < 5
        release.set()
        loop.wait_all(timeout=10)
        with pytest.raises(RuntimeError, match="from a task of the same loop"):
            loop.run_task(nested())
    finally:
        loop.close()
