"""Embedding checkpoints in one process (standalone mode): atomic saves, tables and
optimizer state saved together, damaged files named, earlier layouts refused by name.

A crash is simulated by raising :class:`Crash` (a ``BaseException``, so no
``except Exception`` in the library sees it) at a chosen point of a save: what is
left on disk is what a process killed at that point would leave.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, Dict

import pytest
import torch

from pyg_dist import checkpoint
from pyg_dist.embedding import (CheckpointError, DistEmbedding, SparseAdagrad, SparseAdam,
                                SparseOptimizer, load_checkpoint, save_checkpoint)
from pyg_dist.format._digest import file_digest

N, D = 10, 3


class Crash(BaseException):
    """Stands in for the process dying at this point."""


def _rows(seed: float) -> torch.Tensor:
    return torch.arange(N * D, dtype=torch.float32).view(N, D) + seed


def _table(name: str, seed: float = 0.0) -> DistEmbedding:
    emb = DistEmbedding(N, D, name=name)
    emb.weight[torch.arange(N)] = _rows(seed)
    return emb


def _crash_at(monkeypatch: pytest.MonkeyPatch, point: str, after_saves: int = 1) -> None:
    """Makes the next save die at ``point``: ``"shard"`` right after the
    ``after_saves``-th shard was written, or just before the file named ``point``
    (``rank_0.pt``, ``info.json``, ``LATEST``) is renamed into place."""
    if point == "shard":
        real_save, count = torch.save, [0]

        def save(obj, f, *args, **kwargs):  # type: ignore[no-untyped-def]
            real_save(obj, f, *args, **kwargs)
            count[0] += 1
            if count[0] == after_saves:
                raise Crash(f"died after writing shard {count[0]}")
        monkeypatch.setattr(torch, "save", save)
        return
    real_replace = os.replace

    def replace(src, dst):  # type: ignore[no-untyped-def]
        if os.path.basename(dst) == point:
            raise Crash(f"died before {point} was in place")
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("point", ["shard", "rank_0.pt", "info.json", "LATEST"])
def test_a_crash_mid_save_leaves_the_previous_checkpoint(tmp_path: Path, point: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ckpt"
    emb = _table(f"crash_{point}", seed=1.0)
    emb.save(path)
    emb.weight[torch.arange(N)] = _rows(100.0)
    with monkeypatch.context() as patch:
        _crash_at(patch, point)
        with pytest.raises(Crash):
            emb.save(path)
    emb.weight[torch.arange(N)] = torch.zeros(N, D)
    emb.load(path)  # the previous checkpoint, complete and unmixed
    assert torch.equal(emb.weight[torch.arange(N)], _rows(1.0))

    emb.weight[torch.arange(N)] = _rows(200.0)
    emb.save(path)  # the next save switches over and removes what the crash left
    emb.weight[torch.arange(N)] = torch.zeros(N, D)
    emb.load(path)
    assert torch.equal(emb.weight[torch.arange(N)], _rows(200.0))
    latest = (path / "LATEST").read_text().strip()
    assert sorted(p.name for p in path.iterdir()) == ["LATEST", latest]
    assert sorted(p.name for p in (path / latest).iterdir()) == ["info.json", "rank_0.pt",
                                                                 "shards"]
    assert [p.name for p in (path / latest / "shards").iterdir()] == ["0_0_r0.pt"]


def _state(emb: DistEmbedding, opt: SparseAdam) -> Dict[str, torch.Tensor]:
    every = torch.arange(N)
    out = {"weight": emb.weight[every]}
    out.update({k: t[every] for k, t in opt.state[emb.name].items()})
    return out


def _train(emb: DistEmbedding, opt: SparseOptimizer, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(2):
        opt.zero_grad()
        ids = torch.randint(0, N, (6,), generator=gen)
        (emb(ids) * torch.randn(6, D, generator=gen)).sum().backward()
        opt.step()


def test_tables_and_optimizer_state_are_saved_together(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ckpt"
    emb = _table("pair_table")
    opt = SparseAdam(emb, lr=0.05, betas=(0.7, 0.9), eps=1e-6)
    _train(emb, opt, seed=1)
    save_checkpoint(path, embeddings=[emb], optimizers=[opt])
    saved = _state(emb, opt)
    _train(emb, opt, seed=2)
    opt.lr = 0.5
    with monkeypatch.context() as patch:  # dies after the table, before the optimizer state
        _crash_at(patch, "shard", after_saves=1)
        with pytest.raises(Crash):
            save_checkpoint(path, embeddings=[emb], optimizers=[opt])
    for tensor in [emb.weight, *opt.state[emb.name].values()]:
        tensor[torch.arange(N)] = torch.zeros(tensor.shape, dtype=tensor.dtype)
    opt.lr = 1.0
    load_checkpoint(path, embeddings=[emb], optimizers=[opt])
    got = _state(emb, opt)
    assert all(torch.equal(got[k], saved[k]) for k in saved), "table and state of one save"
    assert (opt.lr, opt.betas, opt.eps) == (0.05, (0.7, 0.9), 1e-6)

    # the per-object methods read the combined checkpoint too
    emb.weight[torch.arange(N)] = torch.zeros(N, D)
    emb.load(path)
    assert torch.equal(emb.weight[torch.arange(N)], saved["weight"])
    opt.load(path)
    other = _table("pair_other")
    with pytest.raises(CheckpointError, match="has no entry 'embedding.pair_other'"):
        load_checkpoint(path, embeddings=[emb, other])
    with pytest.raises(CheckpointError, match="entry 'optimizer.pair_table' was saved as a "
                                              "stateful SparseAdam, but is loaded into a "
                                              "stateful SparseAdagrad"):
        SparseAdagrad(emb, lr=0.1).load(path)
    with pytest.raises(ValueError, match="nothing to save"):
        save_checkpoint(path)


class Unsafe:
    """Not loadable with ``weights_only=True``."""


def _shard(root: Path) -> Path:
    return sorted(root.rglob("*_r0.pt"))[0]


def _info(root: Path) -> Path:
    return root / (root / "LATEST").read_text().strip() / "info.json"


def _edit_shard(change: Callable[[dict], object]) -> Callable[[Path], Path]:
    """Rewrites a shard and records its new digest in info.json (as whoever edits a
    checkpoint can), so that what is loaded is checked beyond its digest."""
    def edit(root: Path) -> Path:
        file = _shard(root)
        obj = torch.load(file, weights_only=True)
        torch.save(change(obj), file)
        _edit_info(lambda i: i["digests"].update({f"shards/{file.name}": file_digest(file)})
                   )(root)
        return file
    return edit


def _flip_byte(file: Path) -> Path:
    """Changes one byte in the middle of ``file`` in place (its size stays)."""
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x40
    file.write_bytes(bytes(data))
    return file


def _pointer_folder(root: Path) -> Path:
    pointer = root / "LATEST"
    pointer.unlink()
    pointer.mkdir()
    return pointer


def _truncate(file: Path) -> Path:
    data = file.read_bytes()
    file.write_bytes(data[:len(data) // 2])
    return file


def _edit_info(change: Callable[[dict], object]) -> Callable[[Path], Path]:
    def edit(root: Path) -> Path:
        file = _info(root)
        info = json.loads(file.read_text())
        change(info)
        file.write_text(json.dumps(info))
        return file
    return edit


def _first_shard_entry(info: dict) -> list:
    """``[file, start, stop]`` of the table's first shard."""
    return next(iter(info["sharded"].values()))[0]["shards"][0]


def _pointer(text: str) -> Callable[[Path], Path]:
    def edit(root: Path) -> Path:
        (root / "LATEST").write_text(text)
        return root / "LATEST"
    return edit


DAMAGE: Dict[str, Callable[[Path], Path]] = {
    "truncated shard": lambda root: _truncate(_shard(root)),
    "byte flipped in a shard": lambda root: _flip_byte(_shard(root)),
    "pointer is a folder": _pointer_folder,
    "shard not weights_only-safe": _edit_shard(lambda o: {**o, "rows": Unsafe()}),
    "shard not a dict": _edit_shard(lambda o: [o["rows"]]),
    "shard without rows": _edit_shard(lambda o: {"start": o["start"], "stop": o["stop"]}),
    "shard start not an int": _edit_shard(lambda o: {**o, "start": float(o["start"])}),
    "shard rows not a tensor": _edit_shard(lambda o: {**o, "rows": o["rows"].tolist()}),
    "shard rows of another dtype": _edit_shard(lambda o: {**o, "rows": o["rows"].double()}),
    "shard rows of another shape": _edit_shard(lambda o: {**o, "rows": o["rows"][:, :2]}),
    "shard rows too few": _edit_shard(lambda o: {**o, "rows": o["rows"][1:]}),
    "truncated info.json": lambda root: _truncate(_info(root)),
    "info start not an int": _edit_info(lambda i: _first_shard_entry(i).__setitem__(1, "0")),
    "info shard outside the folder": _edit_info(
        lambda i: _first_shard_entry(i).__setitem__(0, "../0_0_r0.pt")),
    "info without sharded tensors": _edit_info(lambda i: i.pop("sharded")),
    "info with fewer sharded tensors": _edit_info(
        lambda i: next(iter(i["sharded"].values())).clear()),
    "pointer to a missing version": _pointer("step999999999-deadbeef\n"),
    "pointer outside the folder": _pointer("../elsewhere\n"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_file_is_named(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "ckpt"
    emb = _table(f"damaged_{damage.replace(' ', '_')}", seed=3.0)
    emb.save(path)
    file = DAMAGE[damage](path)
    emb.weight[torch.arange(N)] = torch.zeros(N, D)
    with pytest.raises(CheckpointError, match=re.escape(str(file))):
        emb.load(path)


def _write_layout_1(path: Path) -> None:
    """An embedding checkpoint as the first release wrote it: everything in ``path``."""
    path.mkdir(parents=True)
    torch.save({"start": 0, "stop": N, "rows": _rows(5.0)}, path / "t0_r0.pt")
    (path / "manifest.json").write_text(json.dumps({"format": "pyg_dist.embedding"}))
    (path / "DONE").write_text("complete\n")


def test_earlier_embedding_layouts_are_refused_by_name(tmp_path: Path) -> None:
    """The embedding-only checkpoint of earlier releases (files in the folder, or
    ``LATEST`` naming a ``v000001-...`` version) is not read: a clear error, no rows."""
    emb = _table("layout_1_table")
    _write_layout_1(tmp_path / "v1")
    with pytest.raises(CheckpointError, match=re.escape(f"{tmp_path / 'v1'} holds no pyg_dist "
                                                        f"checkpoint")):
        emb.load(tmp_path / "v1")
    (tmp_path / "v2" / "v000001-3f9c1a7e").mkdir(parents=True)
    (tmp_path / "v2" / "LATEST").write_text("v000001-3f9c1a7e\n")
    with pytest.raises(CheckpointError, match=r"LATEST names 'v000001-3f9c1a7e', which is "
                                              r"not a complete version"):
        emb.load(tmp_path / "v2")
    assert torch.equal(emb.weight[torch.arange(N)], _rows(0.0))


def test_a_hyper_parameter_edited_in_place_is_named(tmp_path: Path) -> None:
    """A hyper-parameter changed in place would load silently: the digest of the file
    that holds it (the rank's state file) is recorded in info.json."""
    emb = _table("edited_manifest")
    opt = SparseAdagrad(emb, lr=0.25)
    save_checkpoint(tmp_path, embeddings=[emb], optimizers=[opt])
    rank_file = _info(tmp_path).with_name("rank_0.pt")
    state = torch.load(rank_file, weights_only=True)
    state["stateful"]["optimizer.edited_manifest"]["hyper_parameters"]["lr"] = 0.75
    torch.save(state, rank_file)
    with pytest.raises(CheckpointError, match=re.escape(str(rank_file))):
        load_checkpoint(tmp_path, embeddings=[emb], optimizers=[opt])
    assert opt.lr == 0.25


def test_tables_and_optimizers_are_entries_of_the_one_checkpoint(tmp_path: Path) -> None:
    """``DistEmbedding`` and sparse optimizers are Stateful: ``state={...}`` takes them
    under any key, and their ``load_state_dict`` refuses the state of another table."""
    emb = _table("stateful_table", seed=2.0)
    opt = SparseAdagrad(emb, lr=0.3, eps=1e-4)
    _train(emb, opt, seed=3)
    rows, sums = emb.weight[torch.arange(N)], opt.state[emb.name]["sum"][torch.arange(N)]
    checkpoint.save(tmp_path, 5, {"table": emb, "adagrad": opt, "epoch": 2})
    emb.weight[torch.arange(N)] = torch.zeros(N, D)
    opt.state[emb.name]["sum"][torch.arange(N)] = torch.zeros(N, D)
    opt.lr = 1.0
    state = {"table": emb, "adagrad": opt, "epoch": 0}
    assert checkpoint.load(tmp_path, state).step == 5 and state["epoch"] == 2
    assert torch.equal(emb.weight[torch.arange(N)], rows)
    assert torch.equal(opt.state[emb.name]["sum"][torch.arange(N)], sums)
    assert (opt.lr, opt.eps) == (0.3, 1e-4)
    other = _table("stateful_other")
    with pytest.raises(ValueError, match="DistEmbedding 'stateful_other' cannot load the "
                                         "state of table 'stateful_table'"):
        checkpoint.load(tmp_path, {"table": other})
    with pytest.raises(ValueError, match=r"SparseAdagrad of tables \['stateful_other'\] "
                                         r"cannot load the state of one of tables "
                                         r"\['stateful_table'\]"):
        checkpoint.load(tmp_path, {"adagrad": SparseAdagrad(other, lr=0.1)})
