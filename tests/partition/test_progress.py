"""Progress written to a non-terminal comes out as plain lines, never carriage returns."""
from __future__ import annotations

import io as stdio
from pathlib import Path

from pyg_dist import Partitioner
from pyg_dist.datasets.synthetic import community_graph


class _Terminal(stdio.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_on_a_non_terminal() -> None:
    from pyg_dist.partition.progress import track

    stream = stdio.StringIO()
    assert list(track(range(4), "writing partitions", stream=stream)) == [0, 1, 2, 3]
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "writing partitions: 0/4" and lines[-1].startswith("writing partitions: 4/4")
    assert len(lines) == 2  # start and end only: the interval (10 s) never passed
    stream = stdio.StringIO()
    list(track(iter(range(3)), "steps", stream=stream, interval=0.0))  # no len(): no total
    assert stream.getvalue().splitlines()[:2] == ["steps: 0", "steps: 1"]
    stream = stdio.StringIO()
    list(track(range(3), "quiet", stream=stream, enabled=False))
    assert stream.getvalue() == ""


def test_a_terminal_still_gets_a_bar() -> None:
    from pyg_dist.partition.progress import track

    stream = _Terminal()
    list(track(range(3), "bar", stream=stream))
    assert "\r" in stream.getvalue()


def test_partitioner_progress_on_a_non_terminal_stderr(tmp_path: Path, capsys) -> None:
    graph = community_graph(200, avg_degree=4, feat_dim=2, num_classes=2, seed=1)
    Partitioner(graph, 2, tmp_path / "o", progress=True).generate()
    err = capsys.readouterr().err
    assert "\r" not in err, repr(err)
    assert "writing partitions: 0/2" in err and "writing partitions: 2/2" in err, err
