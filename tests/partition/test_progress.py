"""Progress written to a non-terminal comes out as plain lines, never carriage returns."""
from __future__ import annotations

import io as stdio
from pathlib import Path

from pyg_dist import Partitioner
from pyg_dist.datasets import community_graph


class _Terminal(stdio.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_on_a_non_terminal() -> None:
    from pyg_dist._progress import track

    stream = stdio.StringIO()
    assert list(track(range(4), "writing partitions", stream=stream)) == [0, 1, 2, 3]
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "writing partitions: 0/4" and lines[-1].startswith("writing partitions: 4/4")
    assert len(lines) == 2  # start and end only: the interval (10 s) never passed
    stream = stdio.StringIO()
    list(track(iter(range(3)), "steps", stream=stream, interval=0.0))  # no len(): no total
    lines = stream.getvalue().splitlines()
    assert lines[0] == "steps: 0" and lines[1].startswith("steps: 1 | ")  # and its rate
    assert "ETA" not in stream.getvalue()  # no total, no time left
    stream = stdio.StringIO()
    list(track(range(3), "quiet", stream=stream, enabled=False))
    assert stream.getvalue() == ""


def test_a_terminal_still_gets_a_bar() -> None:
    from pyg_dist._progress import track

    stream = _Terminal()
    list(track(range(3), "bar", stream=stream))
    assert "\r" in stream.getvalue()


def test_partitioner_progress_on_a_non_terminal_stderr(tmp_path: Path, capsys) -> None:
    graph = community_graph(200, avg_degree=4, feat_dim=2, num_classes=2, seed=1)
    Partitioner(graph, 2, tmp_path / "o", progress=True).generate()
    err = capsys.readouterr().err
    assert "\r" not in err, repr(err)
    assert "writing partitions: 0/2" in err and "writing partitions: 2/2" in err, err


class _Clock:
    """A fake clock: each call returns the next of ``times``."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_plain_lines_carry_rates_and_eta() -> None:
    from pyg_dist._progress import track

    stream = stdio.StringIO()
    batches = [{"seeds": 100}] * 4
    # start at 0; items done at 1, 2, 4, 5 s (a line every 2 items); the end read at 5 s
    clock = _Clock(0.0, 1.0, 2.0, 4.0, 5.0, 5.0)
    got = list(track(batches, "epoch 1 train", stream=stream, every=2, unit="batches",
                     count=("seeds", lambda b: b["seeds"]), clock=clock))
    assert got == batches
    assert stream.getvalue().splitlines() == [
        "epoch 1 train: 0/4",
        "epoch 1 train: 2/4 (50%) | 1 batches/s, 100 seeds/s | ETA 2s",
        "epoch 1 train: 4/4 done in 5.0s | 0.8 batches/s, 80 seeds/s",
    ]


def test_eta_and_rate_formats() -> None:
    from pyg_dist._progress import format_rate, format_seconds, progress_line

    assert [format_rate(v) for v in (0.0, 0.5123, 12.34, 456.7, 3104.0, 2.5e6)] == \
        ["0", "0.512", "12.3", "457", "3.1k", "2.5M"]
    assert [format_seconds(s) for s in (9.4, 65, 7380)] == ["9s", "1m05s", "2h03m"]
    # 10 of 1000 layer batches in 20 s: 990 left at 0.5/s is 1980 s
    assert progress_line("layer 1/2", 10, 1000, 20.0, unit="batches") == \
        "layer 1/2: 10/1000 (1%) | 0.5 batches/s | ETA 33m00s"
    assert progress_line("steps", 3, None, 1.5) == "steps: 3 | 2 items/s"  # no total: no ETA
