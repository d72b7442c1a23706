"""``checkpoint.save/load(path, step, state={...})`` in one process: LR schedulers, a user
object with ``state_dict()``/``load_state_dict()`` and JSON values round-trip; a key or
kind that differs between save and load is named; what could not be loaded without
unpickling is refused at save; a forged ``info.json`` is refused."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
import torch

from pyg_dist import checkpoint
from pyg_dist.checkpoint import CheckpointError, _files as files


class Counter:
    """A user object: its state is a tensor, a number and a nested container."""

    def __init__(self) -> None:
        self.count = 0
        self.history = torch.zeros(0)
        self.tags: Dict[str, Any] = {"names": []}

    def step(self, value: float) -> None:
        self.count += 1
        self.history = torch.cat([self.history, torch.tensor([value])])
        self.tags["names"].append(f"s{self.count}")

    def state_dict(self) -> Dict[str, Any]:
        return {"count": self.count, "history": self.history.clone(),
                "tags": {"names": list(self.tags["names"]), "pair": (1, 2.5)}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.count, self.history = state["count"], state["history"]
        self.tags = {"names": list(state["tags"]["names"])}


def _job(seed: int) -> Dict[str, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return {"model": model, "opt": opt,
            "step_lr": torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
            "counter": Counter(), "epoch": 0, "notes": {"best": None}}


def _train(state: Dict[str, Any], steps: int) -> None:
    for _ in range(steps):
        state["opt"].zero_grad()
        loss = state["model"](torch.randn(8, 4)).pow(2).sum()
        loss.backward()
        state["opt"].step()
        state["step_lr"].step()
        state["counter"].step(float(loss))


def test_schedulers_user_objects_and_json_round_trip(tmp_path: Path) -> None:
    saved = _job(0)
    _train(saved, 3)
    saved["epoch"], saved["notes"] = 4, {"best": 0.5, "seen": [1, 2]}
    checkpoint.save(tmp_path, 3, saved)
    fresh = _job(1)
    info = checkpoint.load(tmp_path, fresh)
    assert info.step == 3 and info.values == {"epoch": 4, "notes": {"best": 0.5, "seen": [1, 2]}}
    assert fresh["epoch"] == 4 and fresh["notes"] == saved["notes"]  # written back
    assert fresh["step_lr"].state_dict() == saved["step_lr"].state_dict()
    assert fresh["opt"].param_groups[0]["lr"] == saved["opt"].param_groups[0]["lr"] == 0.05
    assert fresh["counter"].count == 3 and fresh["counter"].tags == saved["counter"].tags
    assert torch.equal(fresh["counter"].history, saved["counter"].history)
    # continuing gives what never stopping gives
    torch.manual_seed(7)
    _train(saved, 2)
    torch.manual_seed(7)
    _train(fresh, 2)
    for a, b in zip(saved["model"].parameters(), fresh["model"].parameters()):
        assert torch.equal(a, b)
    assert fresh["step_lr"].get_last_lr() == saved["step_lr"].get_last_lr()


def test_a_key_or_kind_that_differs_is_named(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 1, _job(0))
    state = _job(1)
    with pytest.raises(CheckpointError, match=r"has no entry 'sched' \(it holds 'counter' "
                                              r"\(stateful Counter\), 'epoch' \(json\)"):
        checkpoint.load(tmp_path, {"sched": state["step_lr"]})
    exp = torch.optim.lr_scheduler.ExponentialLR(state["opt"], gamma=0.9)
    with pytest.raises(CheckpointError, match="entry 'step_lr' was saved as a stateful StepLR, "
                                              "but is loaded into a stateful ExponentialLR"):
        checkpoint.load(tmp_path, {"step_lr": exp})
    with pytest.raises(CheckpointError, match="entry 'epoch' was saved as a json, but is "
                                              "loaded into a stateful Counter"):
        checkpoint.load(tmp_path, {"epoch": Counter()})
    with pytest.raises(CheckpointError, match="entry 'model' was saved as a module, but is "
                                              "loaded into a json"):
        checkpoint.load(tmp_path, {"model": 3})
    assert state["counter"].count == 0  # nothing was loaded
    partial = _job(2)  # a subset of the saved keys loads (e.g. the model to evaluate)
    checkpoint.load(tmp_path, {"model": partial["model"]})
    assert torch.equal(partial["model"].weight, _job(0)["model"].weight)


class Holder:
    """State that could only be loaded by unpickling (a function)."""

    def state_dict(self) -> Dict[str, Any]:
        return {"ok": torch.ones(2), "hook": [len]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        raise AssertionError("never loaded")


def test_arguments_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 1, _job(0))
    before = (tmp_path / files.LATEST).read_text()
    with pytest.raises(TypeError, match=r"state\['holder'\]\.state_dict\(\): the value at "
                                        r"\['hook'\]\[0\] is a builtin_function_or_method"):
        checkpoint.save(tmp_path, 2, {"holder": Holder()})
    assert (tmp_path / files.LATEST).read_text() == before
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1  # the failed one is gone
    with pytest.raises(TypeError, match=r"state\['f'\] must be a torch.nn.Module"):
        checkpoint.save(tmp_path, 2, {"f": len})
    job = _job(0)
    with pytest.raises(ValueError, match=r"optimizer state\['opt'\] trains parameters of no "
                                         r"single module"):
        checkpoint.save(tmp_path, 2, {"opt": job["opt"]})
    with pytest.raises(ValueError, match="is not a JSON value"):
        checkpoint.save(tmp_path, 2, {"x": float("nan")})


@pytest.mark.parametrize("field, value", [
    ("entries", {"model": ["pickle", ""]}),
    ("values", {"not_an_entry": 1}),
    ("sharded", {"counter": [{"shape": [2], "dtype": "os.system", "shards": []}]}),
])
def test_a_forged_info_json_is_refused(tmp_path: Path, field: str, value: Any) -> None:
    name = checkpoint.save(tmp_path, 1, _job(0))
    info = tmp_path / name / files.INFO
    raw = json.loads(info.read_text())
    raw[field] = {**raw[field], **value} if field != "entries" else value
    info.write_text(json.dumps(raw))
    state = _job(1)
    with pytest.raises(CheckpointError, match=str(info)):
        checkpoint.load(tmp_path, state)
