"""A loader's position (``state_dict``/``load_state_dict``) in one process: a fresh loader
loaded with the state of one stopped after k batches yields exactly the rest of that
epoch, sampled the same way (random fan-outs), then later epochs as usual."""
from __future__ import annotations

from typing import List, Tuple

import pytest
import torch

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader,
                      LocalFeatureStore, LocalGraphStore, Partitioner, edge_split, node_split,
                      shutdown_rpc)
from pyg_dist.testing import encode_ids

Seen = List[Tuple[torch.Tensor, torch.Tensor]]  # (input_id, n_id) per batch


@pytest.fixture(scope="module")
def cora1(cora, tmp_path_factory):
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora1_state")
    Partitioner(data, 1, root, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    yield stores, DistContext(rank=0, world_size=1)
    shutdown_rpc()


def _loader(stores, ctx, **options) -> DistNeighborLoader:
    ids = node_split(stores, "train", ctx)
    kwargs = dict(data=stores, num_neighbors=[4, 3], input_nodes=ids, batch_size=16,
                  shuffle=True, concurrency=3, current_ctx=ctx, seed=7)
    return DistNeighborLoader(**{**kwargs, **options})


def _take(loader, k: int = -1) -> Seen:
    out: Seen = []
    for batch in loader:
        out.append((batch.input_id.clone(), batch.n_id.clone()))
        if len(out) == k:
            break
    return out


def _same(a: Seen, b: Seen) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
                                    for x, y in zip(a, b))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_workers", [0, pytest.param(1, marks=pytest.mark.multiprocess)])
def test_resume_yields_exactly_the_rest_of_the_epoch(cora1, num_workers):
    stores, ctx = cora1
    ref = _loader(stores, ctx)
    epochs = [_take(ref) for _ in range(3)]
    ref.close()
    assert len(epochs[1]) > 5 and not _same(epochs[0], epochs[1])

    first = _loader(stores, ctx, num_workers=num_workers)
    _take(first)                      # epoch 0
    head = _take(first, 5)            # 5 batches of epoch 1, then stop
    state = first.state_dict()
    first.close()
    assert (state["epoch"], state["batch"]) == (1, 5)

    resumed = _loader(stores, ctx, num_workers=num_workers)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    tail = _take(resumed)
    assert _same(head + tail, epochs[1])          # none skipped, none repeated, same n_id
    assert resumed.state_dict()["epoch"] == 2 and resumed.state_dict()["batch"] == 0
    assert _same(_take(resumed), epochs[2])       # then whole epochs as usual
    resumed.close()


def test_batches_do_not_depend_on_concurrency(cora1):
    """Every batch's random draws come from (seed, epoch, batch, rank), not from a stream
    that advances with whatever was sampled before."""
    stores, ctx = cora1
    one, many = _loader(stores, ctx, concurrency=1), _loader(stores, ctx, concurrency=6)
    many.load_state_dict({**one.state_dict(), "batch": 2})
    assert _same(_take(one)[2:], _take(many))
    one.close()
    many.close()


def test_state_after_a_full_epoch_points_at_the_next(cora1):
    stores, ctx = cora1
    loader = _loader(stores, ctx)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (0, 0)
    _take(loader)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (1, 0)
    state = loader.state_dict()
    assert all(isinstance(v, (int, str, bool)) for v in state.values())
    loader.close()


@pytest.mark.parametrize("change, field", [
    (lambda s: s.pop("epoch"), "epoch"),
    (lambda s: s.update(batch="3"), "batch"),
    (lambda s: s.update(batch=10_000), "batch"),
    (lambda s: s.update(epoch=-1), "epoch"),
    (lambda s: s.update(shuffle=1), "shuffle"),
    (lambda s: s.update(extra=1), "extra"),
    (lambda s: s.update(version=99), "version"),
    (lambda s: s.update(seed=8), "seed"),
    (lambda s: s.update(batch_size=32), "batch_size"),
    (lambda s: s.update(seeds_digest=s["seeds_digest"] + 1), "seeds_digest"),
    (lambda s: s.update(world_size=2, rank=1), "world size"),
])
def test_bad_states_name_the_field(cora1, change, field):
    stores, ctx = cora1
    loader = _loader(stores, ctx)
    state = loader.state_dict()
    change(state)
    with pytest.raises(ValueError, match=field):
        loader.load_state_dict(state)
    with pytest.raises(ValueError, match="must be a dict"):
        loader.load_state_dict([1, 2])
    loader.close()


def test_state_of_other_sampling_options_is_refused(cora1):
    stores, ctx = cora1
    a, b = _loader(stores, ctx), _loader(stores, ctx, num_neighbors=[4, 4])
    with pytest.raises(ValueError, match="options_digest"):
        b.load_state_dict(a.state_dict())
    a.close()
    b.close()


def test_link_loader_resumes_with_the_same_negatives(cora1):
    stores, ctx = cora1
    seeds = edge_split(stores, ctx)[:, :200]

    def make() -> DistLinkNeighborLoader:
        return DistLinkNeighborLoader(data=stores, num_neighbors=[3, 2], edge_label_index=seeds,
                                      neg_sampling="binary", batch_size=20, shuffle=True,
                                      current_ctx=ctx, seed=3)

    def take(loader, k: int = -1) -> Seen:
        out: Seen = []
        for batch in loader:
            out.append((batch.n_id[batch.edge_label_index].clone(), batch.n_id.clone()))
            if len(out) == k:
                break
        return out

    ref, first, resumed = make(), make(), make()
    full = take(ref)
    head = take(first, 4)
    resumed.load_state_dict(first.state_dict())
    assert _same(head + take(resumed), full)
    for loader in (ref, first, resumed):
        loader.close()


def test_an_epoch_samples_the_same_whatever_ran_before(cora1):
    """Failed before batches were seeded per (seed, epoch, batch, rank): a fresh loader
    set to epoch 1 sampled other neighbourhoods than one that had run epoch 0."""
    stores, ctx = cora1
    ran, fresh = _loader(stores, ctx), _loader(stores, ctx)
    _take(ran)
    fresh.set_epoch(1)
    assert _same(_take(ran), _take(fresh))
    ran.close()
    fresh.close()
