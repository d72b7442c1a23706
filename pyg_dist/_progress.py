"""Progress of long steps: a bar on a terminal, plain lines with rates and an ETA anywhere
else. One helper for partitioning phases, inference layers and training epochs.

tqdm redraws its bar with carriage returns, which a CI log or ``| tee`` shows as
one garbled line. :func:`track` draws a bar only when the stream is a terminal;
otherwise it prints plain lines at the start, at the end, and at most every ``interval``
seconds (or every ``every`` items) between, each with the rate so far and the time left::

    epoch 1 train: 0/118
    epoch 1 train: 50/118 (42%) | 12.1 batches/s, 3.10k seeds/s | ETA 6s
    epoch 1 train: 118/118 done in 9.8s | 12.0 batches/s, 3.08k seeds/s

Over a pyg_dist loader, ``stages=True`` (or ``PYG_DIST_PROGRESS=stages``) adds where the
loader's time went (its ``stats().split()``) to every line::

    epoch 1 train: 50/118 (42%) | 12.1 batches/s, 3.10k seeds/s | ETA 6s | sample 41%
    dedupe 12% fetch 30% (own 30 direct 0 remote 0) collate 4% | 80.2 ms/batch, wait 3.1
    ms/batch

:func:`step` reports a single step that has no items.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, TextIO, Tuple, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
PLAIN_INTERVAL_S = 10.0
#: ``stages``: progress over a loader shows where its time went (``track(stages=None)``)
PROGRESS_ENV = "PYG_DIST_PROGRESS"
_PROGRESS_VALUES = ("", "0", "off", "none", "stages")
Clock = Callable[[], float]
#: ``(name, count)``: a second rate, e.g. ``("seeds", lambda batch: batch.batch_size)``
Counter = Tuple[str, Callable[[object], float]]


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (False if it cannot tell)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def format_rate(value: float) -> str:
    """``0.512``, ``12.3``, ``456``, ``3.10k``, ``2.50M``: three significant digits."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}" if value >= 0.001 else "0"


def format_seconds(seconds: float) -> str:
    """``9s``, ``1m05s``, ``2h03m``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(desc: str, done: int, total: Optional[int], elapsed: float,
                  unit: str = "items", counted: Optional[Tuple[str, float]] = None,
                  finished: bool = False) -> str:
    """One plain progress line.

    Args:
        desc (str): what is being done, e.g. ``"epoch 1 train"``.
        done (int): items done so far.
        total (int, optional): items in all (``None``: unknown, no percentage or ETA).
        elapsed (float): seconds since the start.
        unit (str): what an item is, for the rate (``"batches"``).
        counted (tuple, optional): ``(name, amount so far)`` of a second rate (seeds).
        finished (bool): the closing line (``done in``, no ETA).
    """
    text = f"{desc}: {done}" + ("" if total is None else f"/{total}")
    if done == 0 and not finished:
        return text
    if finished:
        text += f" done in {elapsed:.1f}s"
    elif total:
        text += f" ({100 * done // total}%)"
    if elapsed <= 0:
        return text
    rates = [f"{format_rate(done / elapsed)} {unit}/s"]
    if counted is not None:
        rates.append(f"{format_rate(counted[1] / elapsed)} {counted[0]}/s")
    text += " | " + ", ".join(rates)
    if not finished and total is not None and done < total:
        text += f" | ETA {format_seconds((total - done) * elapsed / done)}"
    return text


def stages_wanted(stages: Optional[bool] = None) -> bool:
    """``stages``, or when ``None`` whether ``PYG_DIST_PROGRESS=stages`` is set.

    Raises:
        ValueError: ``PYG_DIST_PROGRESS`` holds another value than ``stages``, ``0``,
            ``off``, ``none`` or nothing.
    """
    if stages is not None:
        return bool(stages)
    value = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if value not in _PROGRESS_VALUES:
        raise ValueError(f"{PROGRESS_ENV}={value!r}: expected 'stages' (show where a "
                         f"loader's time goes) or 'off'")
    return value == "stages"


def _split_of(items: object) -> Optional[Callable[[], str]]:
    """What a loader's ``stats().split()`` says, as a callable (``None``: no stats)."""
    stats = getattr(items, "stats", None)
    return (lambda: stats().split()) if callable(stats) else None


def _line(stream: TextIO, text: str) -> None:
    print(text, file=stream, flush=True)


def track(items: Iterable[T], desc: str, enabled: bool = True, stream: Optional[TextIO] = None,
          interval: float = PLAIN_INTERVAL_S, every: Optional[int] = None, unit: str = "items",
          count: Optional[Counter] = None, clock: Clock = time.monotonic,
          stages: Optional[bool] = None) -> Iterator[T]:
    """Yields ``items`` while reporting how many were done, how fast, and the time left.

    Args:
        items (Iterable): what to iterate over (its ``len()`` is the total, if any).
        desc (str): what is being done, e.g. ``"writing partitions"``.
        enabled (bool): report at all.
        stream (TextIO, optional): where to report (default: ``sys.stderr`` at call time).
        interval (float): seconds between plain lines (not on a terminal).
        every (int, optional): a plain line every ``every`` items instead.
        unit (str): what an item is (``"batches"``), for the rate.
        count (tuple, optional): ``(name, fn)``: a second rate of ``fn(item)`` summed over
            the items done, e.g. ``("seeds", lambda b: b.batch_size)``.
        clock (callable): seconds now (tests pass a fake clock).
        stages (bool, optional): over a pyg_dist loader, add where its time went to every
            line (the loader's ``stats().split()``; default: ``PYG_DIST_PROGRESS=stages``).
    """
    stream = sys.stderr if stream is None else stream
    split = _split_of(items) if enabled and stages_wanted(stages) else None
    if not enabled:
        yield from items
    elif is_terminal(stream):
        bar = tqdm(items, desc=desc, file=stream, leave=False, unit=f" {unit}")
        last = clock()
        for item in bar:
            yield item
            if split is not None and clock() - last >= 1.0:
                bar.set_postfix_str(split(), refresh=False)
                last = clock()
    else:
        yield from _plain(items, desc, stream, interval, every, unit, count, clock, split)


def _plain(items: Iterable[T], desc: str, stream: TextIO, interval: float,
           every: Optional[int], unit: str, count: Optional[Counter],
           clock: Clock, split: Optional[Callable[[], str]] = None) -> Iterator[T]:
    def line(text: str) -> None:
        _line(stream, text if split is None else f"{text} | {split()}")

    try:
        total: Optional[int] = len(items)  # type: ignore[arg-type]
    except TypeError:
        total = None
    start = last = clock()
    done, amount = 0, 0.0
    _line(stream, progress_line(desc, done, total, 0.0, unit))
    for item in items:
        yield item
        done += 1
        if count is not None:
            amount += float(count[1](item))
        now = clock()
        due = done % every == 0 if every else now - last >= interval
        if due and done != total:
            counted = None if count is None else (count[0], amount)
            line(progress_line(desc, done, total, now - start, unit, counted))
            last = now
    counted = None if count is None else (count[0], amount)
    line(progress_line(desc, done, total, clock() - start, unit, counted, finished=True))


@contextmanager
def step(desc: str, enabled: bool = True, stream: Optional[TextIO] = None) -> Iterator[None]:
    """Reports ``"<desc>: done in 1.2s"`` (one plain line) when the block succeeds."""
    start = time.monotonic()
    yield
    if enabled:
        _line(sys.stderr if stream is None else stream,
              f"{desc}: done in {time.monotonic() - start:.1f}s")
