"""An asyncio event loop on a background thread, and torch Future -> asyncio Future.

Samplers are coroutines: each hop awaits its remote requests while the loop runs
other batches' hops. Exceptions always travel to whoever waits on the result.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import weakref
from typing import Any, Awaitable, Callable, List, Optional, TypeVar

import torch

T = TypeVar("T")


def _settle(target: "asyncio.Future[Any]", value: Any, error: Optional[BaseException]) -> None:
    if target.done():  # cancelled by the waiter meanwhile
        return
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(value)


def wrap_future(fut: torch.futures.Future, loop: asyncio.AbstractEventLoop,
                on_error: Optional[Callable[[BaseException], BaseException]] = None,
                convert: Optional[Callable[[Any], Any]] = None) -> "asyncio.Future[Any]":
    """Returns an asyncio future (of ``loop``) completed when the torch future is.

    Args:
        fut: the torch future (e.g. from ``rpc_async``).
        loop: the event loop the returned future belongs to.
        on_error: maps the torch future's exception to the one raised to the waiter
            (e.g. to name the peer that failed).
        convert: maps the value to the result (may raise: the waiter gets that error).
    """
    target = loop.create_future()

    def done(f: torch.futures.Future) -> None:
        value, error = None, None
        try:
            value = f.value()
        except BaseException as exc:  # delivered to the waiter, never dropped
            error = on_error(exc) if on_error else exc
        if error is None and convert is not None:
            try:
                value = convert(value)
            except BaseException as exc:  # delivered to the waiter, never dropped
                error = exc
        loop.call_soon_threadsafe(_settle, target, value, error)

    fut.add_done_callback(done)
    return target


async def gather_all(*futures: Awaitable[Any]) -> List[Any]:
    """Awaits every future and returns their results in order; if any failed, raises the
    first failure only after all have finished, so no exception is left unretrieved
    (and no request is still writing into buffers the caller is about to drop)."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)


_LOOPS: "weakref.WeakSet[EventLoopThread]" = weakref.WeakSet()


def _close_all() -> None:
    """Stops every loop before the interpreter finalises: a daemon thread still inside
    native code at that point is unwound by force, and the process aborts."""
    for loop in list(_LOOPS):
        loop.close()


class EventLoopThread:
    """A dedicated asyncio loop running forever on a daemon thread.

    Args:
        name (str): thread name (shows up in stack dumps).
    """

    def __init__(self, name: str = "pyg_dist-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        if not _LOOPS:
            atexit.register(_close_all)  # once per batch of loops; closing twice is a no-op
        _LOOPS.add(self)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        """Schedules a coroutine on the loop; the returned future carries its result
        or its exception."""
        if not self.alive:
            raise RuntimeError("the pyg_dist event loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def run(self, coro: Awaitable[T], timeout: Optional[float] = None) -> T:
        """Runs a coroutine on the loop and blocks until it finishes.

        Raises:
            TimeoutError: if it does not finish within ``timeout`` seconds.
        """
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"pyg_dist task did not finish within {timeout}s") from None

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
