"""The instrument wrapper's own parts, in one process (the faults themselves run in
tests/distributed/test_resume.py, on real torchrun jobs)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from tests.support import instrument


def test_options_before_the_example_and_its_own_after():
    faults, example = instrument.parse(["--seed-log", "/tmp/s", "--kill-at", "3:2", "--",
                                        "ex.py", "--kill-at", "9:9"])
    assert (faults.kill_at, faults.kill_rank, faults.seed_log) == ((3, 2), 1, Path("/tmp/s"))
    assert example == ["ex.py", "--kill-at", "9:9"]  # the example's arguments are its own


@pytest.mark.parametrize("argv", [["--kill-at", "3", "--", "ex.py"], ["--"]])
def test_bad_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        instrument.parse(argv)
    assert "error" in capsys.readouterr().err


def test_trained_batches_are_logged_with_their_seeds(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # a restarted job: no kill
    faults = instrument.Faults(kill_at=(2, 1), seed_log=tmp_path)
    batch = Data(n_id=torch.tensor([7, 3, 9]), batch_size=2)
    instrument.trained(faults, 2, 1, 6, batch)
    entry = json.loads((tmp_path / "seeds_rank1.jsonl").read_text())
    assert (entry["inc"], entry["epoch"], entry["step"], entry["seeds"]) == (1, 2, 6, [7, 3])


def test_reports_are_read_per_rank_and_leave_the_json_line_last():
    figures = instrument.Figures(epochs=[(2.0, 1.0), (1.0, 0.25), (1.0, 0.25)], saves=1)
    line = instrument.PREFIX + json.dumps(figures.report())
    output = f"epoch 1\n{line}\n{{\"test_acc\": 0.8}}\n"
    report = instrument.read_reports(output)[0]
    assert report["loader_wait_frac"] == 0.25 and report["first_epoch_s"] == 2.0
    assert not line.startswith("{")


class _Writes:
    """A stream that keeps each write() call apart."""

    def __init__(self) -> None:
        self.calls: list = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_a_report_is_one_whole_line_in_one_write():
    """Ranks share one pipe: a report written in two pieces (text, then newline, as
    print() does) let another rank's line land in between, and the job's result line
    could no longer be found (tests/distributed/test_netns.py failed in CI so)."""
    out = _Writes()
    instrument.emit({"rank": 1, "rss_mb": 2.5}, out)
    assert len(out.calls) == 1 and out.calls[0].endswith("\n")
    assert instrument.read_reports(out.calls[0]) == {1: {"rank": 1, "rss_mb": 2.5}}
