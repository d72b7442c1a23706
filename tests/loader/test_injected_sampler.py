"""A loader given a sampler built by the caller (``neighbor_sampler=``, as PyG's
``NeighborLoader``) samples with that very object."""
from __future__ import annotations

from typing import Any, List

import pytest
import torch

from pyg_dist import DistLinkNeighborLoader, DistNeighborLoader, DistNeighborSampler


class CountingSampler(DistNeighborSampler):
    """Counts the batches it samples (a user's subclass, e.g. one adding a step)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: List[str] = []

    async def sample_nodes(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("nodes")
        return await super().sample_nodes(*args, **kwargs)

    async def sample_edges(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("edges")
        return await super().sample_edges(*args, **kwargs)


def test_node_loader_samples_with_the_injected_sampler(small_graph):
    _, _, stores, ctx = small_graph
    sampler = CountingSampler(stores, [3, 2], current_ctx=ctx, replace=True)
    loader = DistNeighborLoader(stores, input_nodes=torch.arange(40), batch_size=10,
                                current_ctx=ctx, neighbor_sampler=sampler)
    assert loader.sampler is sampler
    batches = list(loader)
    assert len(batches) == 4 and sampler.calls == ["nodes"] * 4
    assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in batches]), torch.arange(40))
    # the sampler's options rule (replace=True, fan-outs [3, 2]), and the state says so
    assert loader.spec.sampler_kwargs["replace"] is True
    assert loader.spec.sampler_kwargs["num_neighbors"] == [3, 2]
    loader.close()


def test_injected_sampler_gives_the_batches_of_the_same_options(small_graph):
    _, _, stores, ctx = small_graph
    built = DistNeighborLoader(stores, [3, 2], input_nodes=torch.arange(20), batch_size=10,
                               current_ctx=ctx, seed=5)
    given = DistNeighborLoader(stores, [3, 2], input_nodes=torch.arange(20), batch_size=10,
                               current_ctx=ctx, seed=5,
                               neighbor_sampler=DistNeighborSampler(stores, [3, 2],
                                                                    current_ctx=ctx))
    for a, b in zip(built, given):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert given.state_dict() == built.state_dict()
    built.close()
    given.close()


def test_link_loader_samples_with_the_injected_sampler(small_graph):
    data, _, stores, ctx = small_graph
    sampler = CountingSampler(stores, [2], current_ctx=ctx)
    loader = DistLinkNeighborLoader(stores, edge_label_index=data.edge_index[:, :30],
                                    batch_size=10, current_ctx=ctx, neighbor_sampler=sampler)
    assert sum(1 for _ in loader) == 3 and sampler.calls == ["edges"] * 3
    loader.close()


@pytest.mark.parametrize("options,match", [
    (dict(num_neighbors=[5, 5]), "num_neighbors"),
    (dict(disjoint=True), "disjoint"),
    (dict(num_workers=1), "num_workers=0"),
    (dict(neighbor_sampler=object()), "DistNeighborSampler"),
])
def test_an_injected_sampler_that_does_not_fit_is_refused(small_graph, options, match):
    _, _, stores, ctx = small_graph
    options.setdefault("neighbor_sampler", DistNeighborSampler(stores, [3, 2],
                                                                current_ctx=ctx))
    with pytest.raises((ValueError, TypeError), match=match):
        DistNeighborLoader(stores, input_nodes=torch.arange(20), batch_size=10,
                           current_ctx=ctx, **options)
