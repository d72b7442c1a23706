"""Progress of long steps: a bar on a terminal, plain lines anywhere else.

tqdm redraws its bar with carriage returns, which a CI log or ``| tee`` shows as
one garbled line. :func:`track` draws a bar only when the stream is a terminal;
otherwise it prints plain lines (``writing partitions: 1/4``) at the start, at the
end, and at most every ``interval`` seconds between. :func:`step` reports a single
step that has no items. The partitioner and the partition CLI both use these.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional, TextIO, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
PLAIN_INTERVAL_S = 10.0


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (False if it cannot tell)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _line(stream: TextIO, text: str) -> None:
    print(text, file=stream, flush=True)


def _count(desc: str, done: int, total: Optional[int]) -> str:
    return f"{desc}: {done}" + ("" if total is None else f"/{total}")


def track(items: Iterable[T], desc: str, enabled: bool = True, stream: Optional[TextIO] = None,
          interval: float = PLAIN_INTERVAL_S, every: Optional[int] = None) -> Iterator[T]:
    """Yields ``items`` while reporting how many were done.

    Args:
        items (Iterable): what to iterate over (its ``len()`` is the total, if any).
        desc (str): what is being done, e.g. ``"writing partitions"``.
        enabled (bool): report at all.
        stream (TextIO, optional): where to report (default: ``sys.stderr`` at call time).
        interval (float): seconds between plain lines (not on a terminal).
        every (int, optional): a plain line every ``every`` items instead.
    """
    stream = sys.stderr if stream is None else stream
    if not enabled:
        yield from items
    elif is_terminal(stream):
        yield from tqdm(items, desc=desc, file=stream, leave=False)
    else:
        yield from _plain(items, desc, stream, interval, every)


def _plain(items: Iterable[T], desc: str, stream: TextIO, interval: float,
           every: Optional[int] = None) -> Iterator[T]:
    try:
        total: Optional[int] = len(items)  # type: ignore[arg-type]
    except TypeError:
        total = None
    start = last = time.monotonic()
    done = 0
    _line(stream, _count(desc, done, total))
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        due = done % every == 0 if every else now - last >= interval
        if due and done != total:
            _line(stream, _count(desc, done, total))
            last = now
    _line(stream, f"{_count(desc, done, total)} done in {time.monotonic() - start:.1f}s")


@contextmanager
def step(desc: str, enabled: bool = True, stream: Optional[TextIO] = None) -> Iterator[None]:
    """Reports ``"<desc>: done in 1.2s"`` (one plain line) when the block succeeds."""
    start = time.monotonic()
    yield
    if enabled:
        _line(sys.stderr if stream is None else stream,
              f"{desc}: done in {time.monotonic() - start:.1f}s")
