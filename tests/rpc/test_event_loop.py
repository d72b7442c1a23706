"""Shutting the event loop down with requests in flight (one process: torch futures
completed by another thread stand for RPC replies arriving on TensorPipe's threads)."""
from __future__ import annotations

import asyncio
import threading
import time

import torch

from pyg_dist.rpc import EventLoopThread, wrap_future


def test_a_reply_after_the_loop_closed_is_dropped_without_an_error(capfd):
    loop = EventLoopThread("test-closed")
    fut: torch.futures.Future = torch.futures.Future()
    waiter = wrap_future(fut, loop.loop)
    loop.close()  # the request is not answered within the wait (5 s)
    assert loop.loop.is_closed() and not waiter.done()
    fut.set_result(torch.ones(3))  # the reply arrives after the loop closed
    err = capfd.readouterr().err
    assert "Event loop is closed" not in err and "error" not in err.lower(), err


def test_close_waits_for_a_reply_being_delivered(capfd):
    """A reply whose callback is still running (converting the response) when the
    loop is closed is delivered first: close waits for it, then the loop closes."""
    loop = EventLoopThread("test-in-flight")
    fut: torch.futures.Future = torch.futures.Future()
    entered = threading.Event()

    def slow(value):
        entered.set()
        time.sleep(0.5)
        return value

    waiter = wrap_future(fut, loop.loop, convert=slow)
    replier = threading.Thread(target=fut.set_result, args=(torch.arange(4),))
    replier.start()
    assert entered.wait(5)
    loop.close()
    replier.join(5)
    assert waiter.done() and torch.equal(waiter.result(), torch.arange(4))
    assert loop.loop.is_closed()
    err = capfd.readouterr().err
    assert "Event loop is closed" not in err, err


def test_close_cancels_the_tasks_left_and_lets_them_unwind():
    loop = EventLoopThread("test-tasks")
    unwound = threading.Event()
    never: torch.futures.Future = torch.futures.Future()

    async def batch() -> None:
        try:
            await wrap_future(never, asyncio.get_running_loop())
        finally:
            unwound.set()

    loop.submit(batch())
    time.sleep(0.1)
    loop.close(timeout=0.2)
    assert unwound.is_set() and loop.loop.is_closed()
