"""Wrong arguments to ``checkpoint.save``/``load`` and to a loader's ``load_state_dict``
raise an error naming the argument and what it must be, before
anything is written."""
from __future__ import annotations

import re
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
    ({"restore_rng": "yes"}, r"restore_rng must be True or False"),
    ({"verison": "x"}, r"unexpected keyword argument 'verison'"),
])
def test_load_names_a_wrong_argument(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        checkpoint.load(tmp_path, **kwargs)


@pytest.mark.parametrize("keyword, replacement", [
    ("model", "state={'model': model}"), ("optimizer", "state={'optimizer': optimizer}"),
    ("embeddings", "state={'embedding': emb}"),
    ("sparse_optimizers", "state={'sparse_optimizer': opt}"),
    ("loaders", "state={'loader': loader}"), ("extra", "state={'extra': values}"),
])
def test_removed_keywords_name_their_state_form(tmp_path: Path, keyword: str,
                                                replacement: str) -> None:
    model = torch.nn.Linear(2, 2)
    for call in (lambda: checkpoint.save(tmp_path, 1, {"model": model}, **{keyword: model}),
                 lambda: checkpoint.load(tmp_path, {"model": model}, **{keyword: model})):
        with pytest.raises(TypeError, match=rf"no longer takes {keyword}= .*pass "
                                            rf"{re.escape(replacement)}"):
            call()
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing was written


def test_path_must_be_a_path(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        checkpoint.save(3, step=1, state={"model": torch.nn.Linear(2, 2)})


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


def test_a_loader_entry_keeps_its_position(loader, tmp_path: Path) -> None:
    saved = loader.state_dict()
    checkpoint.save(tmp_path, step=0, state={"loaders.0": loader})
    info = checkpoint.load(tmp_path, state={"loaders.0": loader})
    assert info.exact and info.positions == [(saved["epoch"], saved["batch"])]
