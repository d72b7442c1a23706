"""pyg_dist.loop in one process: the flags, the result line, reduce, and Epochs (resume,
timing, saving) with a real checkpoint folder."""
from __future__ import annotations

import argparse
import json
import math
from types import SimpleNamespace

import pytest
import torch

from pyg_dist import DistContext, loop


def test_parser_has_the_common_flags_and_takes_defaults():
    args = loop.parser("task", epochs=3).parse_args(
        ["--partition-dir", "parts", "--num-neighbors", "25,-1", "--checkpoint-dir", "c"])
    assert (args.partition_dir, args.epochs, args.num_neighbors) == ("parts", 3, [25, -1])
    assert (args.checkpoint_dir, args.device, args.seed, args.num_workers) == ("c", "cpu", 0, 0)


@pytest.mark.parametrize("text", ["", "a,b", "10,-2"])
def test_fanout_refuses_bad_text(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected"):
        loop.fanout(text)


def test_result_line_is_one_json_line_without_nan():
    line = loop.result_line({"acc": 0.123456, "loss": float("nan"), "inf": math.inf,
                             "epochs": 3, "path": "out", "none": None})
    assert "\n" not in line
    assert json.loads(line) == {"acc": 0.1235, "loss": None, "inf": None, "epochs": 3,
                                "path": "out", "none": None}


def test_reduce_without_a_process_group_returns_the_values():
    assert loop.reduce([1, 2.5]) == [1.0, 2.5]
    assert loop.reduce([torch.tensor(3)], op="max") == [3.0]
    with pytest.raises(ValueError, match="op must be one of"):
        loop.reduce([1.0], op="mean")


def test_setup_refuses_an_unknown_device():
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        loop.setup("tpu")


class Counter:
    """A stand-in for a training loader with state: ``epoch`` is the last epoch started."""

    def __init__(self) -> None:
        self.epoch = 0

    def state_dict(self):
        return {"epoch": self.epoch}

    def load_state_dict(self, state):
        self.epoch = int(state["epoch"])


def test_epochs_time_log_and_report(capsys):
    ctx = DistContext()  # one process
    epochs = loop.Epochs(3, SimpleNamespace(epoch=0), ctx)
    seen = []
    for epoch in epochs:
        seen.append(epoch)
        epochs.log(loss=1.0 / epoch, val_acc=0.5)
    assert seen == [1, 2, 3]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("epoch   1 | loss 1.0000 | val_acc 0.5000 | ")
    results = epochs.results()
    assert results["loss"] == pytest.approx(1 / 3) and results["epochs"] == 3
    assert results["world_size"] == 1 and results["epoch_s"] >= 0


def test_epochs_resume_from_the_newest_checkpoint(tmp_path, capsys):
    ctx = DistContext()
    loader = Counter()
    first = loop.Epochs(2, loader, ctx, {"train": loader}, str(tmp_path))
    for epoch in first:
        loader.epoch = epoch  # what iterating a real loader does
    assert "none in" in capsys.readouterr().out
    assert first.state is None, "the state (and the model in it) is let go after training"
    again = Counter()
    second = loop.Epochs(4, again, ctx, {"train": again}, str(tmp_path))
    assert list(second) == [3, 4]
    assert "resumed exactly at step 2" in capsys.readouterr().out
    assert second.results()["epoch_s"] is None  # no epoch was logged


def test_epochs_with_a_checkpoint_dir_need_state(tmp_path):
    with pytest.raises(ValueError, match="needs the state"):
        loop.Epochs(1, SimpleNamespace(epoch=0), DistContext(), None, str(tmp_path))


def test_ranks_sharing_a_gpu_get_gloo_with_a_warning(monkeypatch):
    """NCCL refuses two ranks on one GPU ("Duplicate GPU detected", seen on an H200 with
    NCCL 2.28): ``setup`` then picks gloo, which all-reduces CUDA tensors, and says why."""
    import dataclasses

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cuda = torch.device("cuda", 0)
    ctx = dataclasses.replace(DistContext.from_env(), world_size=2, local_world_size=2)
    with pytest.warns(UserWarning, match="2 ranks share 1 GPU"):
        assert loop._backend(cuda, ctx) == "gloo"
    assert loop._backend(cuda, dataclasses.replace(ctx, local_world_size=1)) == "nccl"
    assert loop._backend(torch.device("cpu"), ctx) == "gloo"


def test_reduce_sends_cpu_values_over_the_gloo_group_when_the_default_is_nccl(monkeypatch):
    """NCCL's default group takes GPU tensors only: CPU values (a label count, say) go over
    pyg_dist's own gloo group."""
    import torch.distributed as dist

    used, own = [], object()
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(loop, "ensure_process_group", lambda ctx: own)
    monkeypatch.setattr(dist, "all_reduce", lambda t, op, group=None: used.append(group))
    assert loop.reduce([4.0], op="max") == [4.0]
    assert used == [own]
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    loop.reduce([4.0])
    assert used == [own, None]
