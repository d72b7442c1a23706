"""Wrong arguments to ``checkpoint.save``/``load`` and to a loader's ``load_state_dict``
raise an error naming the argument and what it must be, before
anything is written."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      Partitioner, checkpoint, node_split, shutdown_rpc)


@pytest.fixture(scope="module")
def loader(tmp_path_factory):
    torch.manual_seed(0)
    n = 40
    data = Data(x=torch.arange(n, dtype=torch.float32).view(-1, 1),
                y=torch.zeros(n, dtype=torch.long),
                edge_index=torch.stack([torch.arange(n), (torch.arange(n) + 1) % n]))
    data.train_mask = torch.ones(n, dtype=torch.bool)
    root = tmp_path_factory.mktemp("ring_args")
    Partitioner(data, 1, root, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    ctx = DistContext(rank=0, world_size=1)
    out = DistNeighborLoader(data=stores, num_neighbors=[2], batch_size=8, shuffle=True,
                             input_nodes=node_split(stores, "train", ctx), current_ctx=ctx,
                             seed=3)
    yield out
    out.close()
    shutdown_rpc()


@pytest.mark.parametrize("kwargs, match", [
    ({"model": "m"}, r"model must be a torch\.nn\.Module"),
    ({"model": torch.nn.Linear(2, 2), "optimizer": "adam"},
     r"optimizer must be a torch\.optim\.Optimizer"),
    ({"loaders": [object()]}, r"loaders\[0\] must be a pyg_dist loader"),
    ({"embeddings": [torch.zeros(3)]}, r"embeddings\[0\] must be a pyg_dist DistEmbedding"),
    ({"sparse_optimizers": 1}, r"sparse_optimizers must be a pyg_dist SparseAdam"),
])
def test_save_names_a_wrong_argument(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        checkpoint.save(tmp_path / "ckpt", step=1, **kwargs)
    assert not (tmp_path / "ckpt").exists()  # nothing written


@pytest.mark.parametrize("kwargs, match", [
    ({"model": "m"}, r"model must be a torch\.nn\.Module"),
    ({"loaders": [object()]}, r"loaders\[0\] must be a pyg_dist loader"),
    ({"restore_rng": "yes"}, r"restore_rng must be True or False"),
])
def test_load_names_a_wrong_argument(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        checkpoint.load(tmp_path, **kwargs)


def test_path_must_be_a_path(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        checkpoint.save(3, step=1, model=torch.nn.Linear(2, 2))


@pytest.mark.parametrize("field, value, match", [
    ("epoch", 2 ** 70, "field 'epoch' must fit in 64 bits"),
    ("epoch", 2 ** 50, r"field 'epoch' must be < 2\*\*48"),
    ("seed", -2 ** 64, "field 'seed' must fit in 64 bits"),
])
def test_loader_state_out_of_range_is_named(loader, field: str, value: int,
                                            match: str) -> None:
    state = {**loader.state_dict(), field: value}
    with pytest.raises(ValueError, match=match):
        loader.load_state_dict(state)
    next(iter(loader))  # the loader is unchanged and still iterates


def test_a_single_loader_is_accepted(loader, tmp_path: Path) -> None:
    saved = loader.state_dict()
    checkpoint.save(tmp_path, step=0, loaders=loader)
    info = checkpoint.load(tmp_path, loaders=loader)
    assert info.exact and info.positions == [(saved["epoch"], saved["batch"])]
