"""``pyg_dist.checkpoint`` in one process: model, dense and sparse optimizers, embeddings
and loader positions come back; saves are atomic (a crash during one leaves the previous
checkpoint loadable); damaged files are named; old versions are pruned.

A crash is simulated by raising :class:`Crash` (a ``BaseException``, so no
``except Exception`` in the library sees it) while a save writes a rank's state.
"""
from __future__ import annotations

import json

import pytest
import torch

from pyg_dist import (DistContext, DistEmbedding, DistNeighborLoader, LocalFeatureStore,
                      LocalGraphStore, Partitioner, SparseAdam, node_split, shutdown_rpc)
from pyg_dist import checkpoint
from pyg_dist.checkpoint import CheckpointError, _files as files
from pyg_dist.testing import encode_ids


class Crash(BaseException):
    """Stands in for the process dying at this point."""


@pytest.fixture(scope="module")
def stores(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora1_ckpt")
    Partitioner(encode_ids(cora), 1, root, progress=False).generate()
    yield LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0)
    shutdown_rpc()


def _loader(stores) -> DistNeighborLoader:
    ctx = DistContext(rank=0, world_size=1)
    return DistNeighborLoader(data=stores, num_neighbors=[3, 2], batch_size=32, shuffle=True,
                              input_nodes=node_split(stores, "train", ctx), current_ctx=ctx,
                              seed=4)


def _model(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def _train(model, opt, steps: int = 2) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 5)).pow(2).sum().backward()
        opt.step()


def test_no_checkpoint_yet_gives_none(tmp_path):
    model, opt = _model(0)
    assert checkpoint.load(tmp_path / "absent", state={"model": model, "optimizer.0": opt}) is None
    assert checkpoint.load(tmp_path, state={"model": model, "optimizer.0": opt}) is None


def test_everything_comes_back(stores, tmp_path):
    model, opt = _model(0)
    _train(model, opt)
    loader = _loader(stores)
    it = iter(loader)
    for _ in range(3):  # the loader is 3 batches into its epoch when saved
        next(it)
    emb = DistEmbedding(50, 4, name="ckpt_emb")
    sparse = SparseAdam([emb], lr=0.1)
    emb(torch.arange(10)).sum().backward()
    sparse.step()
    name = checkpoint.save(tmp_path, step=3, state={"model": model, "optimizer.0": opt,
                                                    f"embeddings.{emb.name}": emb,
                                                    "sparse_optimizers.0": sparse,
                                                    "loaders.0": loader, "extra": {"loss": 1.5}})
    rng_after_save = torch.rand(3)
    rest = [b.n_id for b in it]
    weights, emb_rows = [p.detach().clone() for p in model.parameters()], emb.weight[:]

    model2, opt2 = _model(1)
    emb2 = DistEmbedding(50, 4, name="ckpt_emb2")
    sparse2 = SparseAdam([emb2], lr=0.1)
    loader2 = _loader(stores)
    with pytest.raises(CheckpointError):  # tables are matched by name
        checkpoint.load(tmp_path, state={"model": model2, "optimizer.0": opt2,
                                         f"embeddings.{emb2.name}": emb2,
                                         "sparse_optimizers.0": sparse2, "loaders.0": loader2})
    emb.weight[torch.arange(50)] = torch.zeros(50, 4)
    info = checkpoint.load(tmp_path, state={"model": model2, "optimizer.0": opt2,
                                            f"embeddings.{emb.name}": emb,
                                            "sparse_optimizers.0": sparse, "loaders.0": loader2})
    assert info.step == 3 and info.exact and info.positions == [(0, 3)]
    assert info.extra == {"loss": 1.5} and info.path.endswith(name)
    assert torch.equal(torch.rand(3), rng_after_save)  # torch's RNG as at the save
    assert all(torch.equal(a, b) for a, b in zip(model2.parameters(), weights))
    assert torch.equal(emb.weight[:], emb_rows)
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert all(torch.equal(s1["state"][k]["exp_avg"], s2["state"][k]["exp_avg"])
               for k in s1["state"])
    assert all(torch.equal(a, b) for a, b in zip(rest, [b.n_id for b in loader2]))
    for ld in (loader, loader2):
        ld.close()


def test_keeps_the_newest_versions(tmp_path):
    model, opt = _model(0)
    names = [checkpoint.save(tmp_path, step=s, state={"model": model, "optimizer.0": opt}, keep=2)
             for s in range(4)]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == names[2:]
    assert (tmp_path / files.LATEST).read_text().strip() == names[3]
    assert checkpoint.load(tmp_path, state={"model": model}).step == 3


def test_crash_during_a_save_leaves_the_previous_one(tmp_path, monkeypatch):
    model, opt = _model(0)
    checkpoint.save(tmp_path, step=1, state={"model": model, "optimizer.0": opt})
    before = [p.detach().clone() for p in model.parameters()]
    _train(model, opt)

    def die(*args, **kwargs):
        raise Crash()
    monkeypatch.setattr(files, "write_rank_state", die)
    with pytest.raises(Crash):  # dies after the model files, before publishing
        checkpoint.save(tmp_path, step=2, state={"model": model, "optimizer.0": opt})
    monkeypatch.undo()
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2  # the half-written one
    fresh, fresh_opt = _model(5)
    assert checkpoint.load(tmp_path, state={"model": fresh, "optimizer.0": fresh_opt}).step == 1
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), before))
    checkpoint.save(tmp_path, step=3, state={"model": model, "optimizer.0": opt}, keep=1)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1  # crashed save removed


def _resign(folder) -> None:
    """Records the current digests of ``folder``'s files in its info.json, as whoever
    edits a checkpoint can: what is then loaded must still be checked."""
    info = folder / files.INFO
    raw = json.loads(info.read_text())
    raw["digests"] = files.digest_files(folder, files.version_files(folder))
    info.write_text(json.dumps(raw))


def test_damaged_files_are_named(stores, tmp_path):
    model, opt = _model(0)
    loader = _loader(stores)
    name = checkpoint.save(tmp_path, step=1, state={"model": model, "optimizer.0": opt,
                                                    "loaders.0": loader})
    rank_file = tmp_path / name / files.rank_file(0)
    rank_file.write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="rank_0.pt"):  # its digest differs
        checkpoint.load(tmp_path, state={"model": model, "loaders.0": loader})
    _resign(tmp_path / name)
    with pytest.raises(CheckpointError, match="rank_0.pt"):  # and it is no torch file
        checkpoint.load(tmp_path, state={"model": model, "loaders.0": loader})
    state = {"rank": 0, "world_size": 1, "torch_rng": torch.get_rng_state(), "stateful": {},
             "loaders": {"loaders.0": {**loader.state_dict(), "batch": -1}}}
    torch.save(state, rank_file)
    _resign(tmp_path / name)
    with pytest.raises(CheckpointError, match="batch"):
        checkpoint.load(tmp_path, state={"model": model, "loaders.0": loader})
    info = tmp_path / name / files.INFO
    info.write_text(json.dumps({**json.loads(info.read_text()), "step": "one"}))
    with pytest.raises(CheckpointError, match="step"):
        checkpoint.load(tmp_path, state={"model": model})
    (tmp_path / files.LATEST).write_text("../elsewhere\n")
    with pytest.raises(CheckpointError, match="LATEST"):
        checkpoint.load(tmp_path, state={"model": model})
    loader.close()


def test_asking_for_what_is_not_there(tmp_path):
    model, opt = _model(0)
    checkpoint.save(tmp_path, step=0, state={"model": model})
    with pytest.raises(CheckpointError, match=r"has no entry 'optimizer\.0' \(it holds "
                                              r"'model' \(module\)\)"):
        checkpoint.load(tmp_path, state={"model": model, "optimizer.0": opt})
    with pytest.raises(ValueError, match="step"):
        checkpoint.save(tmp_path, step=-1, state={"model": model})
    with pytest.raises(TypeError, match=r"state\['extra'\]"):
        checkpoint.save(tmp_path, step=1, state={"model": model, "extra": {"x": object()}})
    with pytest.raises(ValueError, match="model"):
        checkpoint.save(tmp_path, step=1, state={"optimizer.0": opt})
