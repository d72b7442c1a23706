"""An asyncio event loop on a background thread, and torch Future -> asyncio Future.

Samplers are coroutines: each hop awaits its remote requests while the loop runs
other batches' hops. Exceptions always travel to whoever waits on the result.

Shutdown with requests in flight (a loop left early, a loader closed, RPC shut down):
a torch future's callback that settles after its loop closed drops its result instead
of raising on the RPC thread, and :meth:`EventLoopThread.close` first waits (bounded)
for the callbacks already running, then cancels the loop's tasks and lets them unwind,
so no batch is left half run holding tensors while the interpreter exits.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import time
import weakref
from typing import Any, Awaitable, Callable, Dict, List, Optional, TypeVar

import torch

T = TypeVar("T")
log = logging.getLogger("pyg_dist")


class _InFlight:
    """How many torch futures' callbacks per loop have not delivered their result yet."""

    def __init__(self) -> None:
        self.counts: Dict[int, int] = {}
        self.changed = threading.Condition()

    def add(self, loop: asyncio.AbstractEventLoop, n: int) -> None:
        with self.changed:
            key = id(loop)
            self.counts[key] = self.counts.get(key, 0) + n
            if self.counts[key] <= 0:
                del self.counts[key]
                self.changed.notify_all()

    def wait(self, loop: asyncio.AbstractEventLoop, timeout: float) -> bool:
        """Waits until no callback of ``loop`` is pending; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while id(loop) in self.counts:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True


_IN_FLIGHT = _InFlight()


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
    _IN_FLIGHT.add(loop, 1)

    def done(f: torch.futures.Future) -> None:
        try:
            _deliver(f, loop, target, on_error, convert)
        finally:
            _IN_FLIGHT.add(loop, -1)

    fut.add_done_callback(done)
    return target


def _deliver(f: torch.futures.Future, loop: asyncio.AbstractEventLoop,
             target: "asyncio.Future[Any]",
             on_error: Optional[Callable[[BaseException], BaseException]],
             convert: Optional[Callable[[Any], Any]]) -> None:
    """Hands the torch future's outcome to ``target`` on its loop (see :func:`wrap_future`)."""
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
    try:
        loop.call_soon_threadsafe(_settle, target, value, error)
    except RuntimeError:  # the loop closed meanwhile: nobody waits for this result
        if not loop.is_closed():
            raise


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
        start (bool): start the thread now (else with :meth:`start`).
    """

    _start_name = "start"

    def __init__(self, name: str = "pyg_dist-loop", start: bool = True) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Starts the loop's thread (a second call does nothing)."""
        if self._thread.ident is not None or self.loop.is_closed():
            return
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
            if asyncio.iscoroutine(coro):
                coro.close()  # never to run: no "was never awaited" warning
            raise RuntimeError("the pyg_dist event loop is closed" if self.loop.is_closed()
                               or self._thread.ident is not None else
                               "the pyg_dist event loop is not started: call "
                               f"{self._start_name}() first")
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

    def cancel_tasks(self, timeout: float = 5.0) -> None:
        """Cancels every task on the loop (batches no one will take) and waits up to
        ``timeout`` seconds for them to unwind; their requests already sent still
        complete (see :meth:`close`)."""
        if not self.alive:
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.loop).result(timeout)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError,
                RuntimeError):  # a task that will not unwind: the caller goes on anyway
            pass

    def close(self, timeout: float = 5.0) -> None:
        """Stops the loop: waits up to ``timeout`` seconds for the callbacks of requests
        still in flight, cancels the tasks left (a batch no one will take) and lets
        them unwind, then stops and closes it."""
        if self.loop.is_closed():
            return
        if self._thread.ident is None:  # never started
            self.loop.close()
            return
        _IN_FLIGHT.wait(self.loop, timeout)
        self.cancel_tasks(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=timeout)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_tasks() -> None:
    """Cancels every other task of the running loop and waits until they ended."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class ConcurrentEventLoop(EventLoopThread):
    """An event loop on a thread of its own that runs at most ``concurrency`` tasks at
    once: ``torch_geometric.distributed``'s ``ConcurrentEventLoop``, for code that
    drives a :class:`~pyg_dist.DistNeighborSampler` by hand, as PyG's tests do::

        loop = ConcurrentEventLoop(2)
        loop.start_loop()
        out = loop.run_task(coro=sampler.node_sample(inputs))

    pyg_dist's loaders need none: they run their own. As PyG's, it starts with
    :meth:`start_loop`; unlike PyG's, a task's exception is raised by :meth:`run_task`
    and kept in the future :meth:`add_task` returns (and logged there), and using a
    loop not started or closed raises instead of waiting forever.

    Args:
        concurrency (int): how many tasks run at once; :meth:`run_task` and
            :meth:`add_task` wait for a free slot.
    """

    _start_name = "start_loop"

    def __init__(self, concurrency: int) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"ConcurrentEventLoop: concurrency must be a positive integer, "
                             f"got {concurrency!r}")
        super().__init__("pyg_dist-concurrent-loop", start=False)
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)

    def start_loop(self) -> None:
        """Starts the loop's thread (a second call does nothing)."""
        self.start()

    def run_task(self, coro: Awaitable[T], timeout: Optional[float] = None) -> T:
        """Runs ``coro`` on the loop in a free slot and returns its result (raises its
        exception; :class:`TimeoutError` after ``timeout`` seconds, if given)."""
        if threading.current_thread() is self._thread:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise RuntimeError("ConcurrentEventLoop.run_task() called from a task of the same "
                               "loop (it would wait for itself): await the coroutine instead")
        with self._slots:
            return self.run(coro, timeout)

    def add_task(self, coro: Awaitable[T], callback: Optional[Callable[[T], Any]] = None
                 ) -> "concurrent.futures.Future[T]":
        """Schedules ``coro`` in a free slot (waiting for one) and returns at once.

        Args:
            coro: the coroutine.
            callback (callable, optional): called with the result when it succeeds
                (on the loop's thread); its own exception is logged.

        Returns:
            a future with the result or the exception (a failure is also logged).
        """
        self._slots.acquire()
        try:
            future = self.submit(coro)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda f: self._finished(f, callback))
        return future

    def _finished(self, future: "concurrent.futures.Future[Any]",
                  callback: Optional[Callable[[Any], Any]]) -> None:
        try:
            if future.cancelled():
                return
            error = future.exception()
            if error is not None:
                log.error("pyg_dist: a ConcurrentEventLoop task failed: %r", error)
            elif callback is not None:
                try:
                    callback(future.result())
                except Exception:  # nobody else could see it: logged with its traceback
                    log.exception("pyg_dist: a ConcurrentEventLoop task's callback failed")
        finally:
            self._slots.release()

    def wait_all(self, timeout: Optional[float] = None) -> None:
        """Waits until every task added has finished.

        Raises:
            TimeoutError: if they have not after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        taken = 0
        try:
            for _ in range(self.concurrency):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._slots.acquire(timeout=left):
                    raise TimeoutError(f"ConcurrentEventLoop: tasks still running after "
                                       f"{timeout}s")
                taken += 1
        finally:
            for _ in range(taken):
                self._slots.release()
