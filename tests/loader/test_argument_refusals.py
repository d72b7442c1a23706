"""Loader arguments PyG refuses are refused here too, at construction, with one clear
line naming the argument (one process; the two-rank case is in
tests/distributed/test_agreement.py)."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dist import DistLinkNeighborLoader, DistNeighborLoader
from pyg_dist.testing import run_ranks


@pytest.fixture
def timed(small_graph):
    """The graph's folder, stores and context: ``x`` float rows, ``time`` integers."""
    return small_graph[1:]


def test_num_neighbors_must_be_a_list_or_dict(timed):
    _, stores, ctx = timed
    with pytest.raises(TypeError, match=r"num_neighbors must be a list of fan-outs \(one per "
                                        r"hop\) or a dict of such lists by edge type, got int 5"):
        DistNeighborLoader(data=stores, num_neighbors=5, current_ctx=ctx)


@pytest.mark.parametrize("fanout, replace", [(10**12, False), (10**12, True), (2**21, True)])
def test_fan_outs_beyond_what_can_be_drawn_are_refused(timed, fanout, replace):
    _, stores, ctx = timed
    with pytest.raises(ValueError, match=rf"fan-out {fanout} .*at most"):
        DistNeighborLoader(data=stores, num_neighbors=[fanout], replace=replace,
                           current_ctx=ctx)


def _big_fan_out_job(root: str, fanout: int, address_space: int) -> list:
    """In a child process limited to ``address_space`` bytes: one batch with ``fanout``
    and one with -1, as (sorted node ids, sorted edge ids) pairs."""
    import resource

    from pyg_dist import DistContext, shutdown_rpc
    from pyg_dist.store import LocalFeatureStore, LocalGraphStore

    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    ctx = DistContext(rank=0, world_size=1)
    out = []
    for value in (fanout, -1):
        loader = DistNeighborLoader(data=stores, num_neighbors=[value, value],
                                    input_nodes=torch.arange(8), batch_size=8, current_ctx=ctx)
        batch = next(iter(loader))
        out.append((sorted(batch.n_id.tolist()), sorted(batch.e_id.tolist())))
        loader.close()
    shutdown_rpc()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_fan_out_beyond_every_degree_allocates_what_it_draws(timed):
    """Without replacement a fan-out of 2**31 - 1 draws every neighbour, as -1 does; what
    it allocates is bounded by the degrees (8 seeds x 2**31 x 8 bytes would be 128 GB,
    far beyond the 12 GB address space the child gets; it is forked from the warm fork
    server, whose mappings count in those 12 GB)."""
    root = timed[0]
    [(big, full)] = run_ranks(_big_fan_out_job, 1, str(root), 2**31 - 1, 12 * 2**30,
                              timeout=240)
    assert big == full, "a fan-out beyond every degree takes all neighbours"


@pytest.mark.parametrize("ratio", [math.inf, math.nan, -1.0, 0.0])
def test_neg_sampling_ratio_must_be_a_finite_positive_number(timed, ratio):
    _, stores, ctx = timed
    with pytest.raises(ValueError, match=r"neg_sampling_ratio must be a number > 0 and finite"):
        DistLinkNeighborLoader(data=stores, num_neighbors=[2], neg_sampling_ratio=ratio,
                               current_ctx=ctx)


@pytest.mark.parametrize("amount", [math.inf, math.nan])
def test_negative_sampling_amount_must_be_finite(timed, amount):
    _, stores, ctx = timed
    with pytest.raises(ValueError, match=r"neg_sampling amount must be a number > 0 and finite"):
        DistLinkNeighborLoader(data=stores, num_neighbors=[2], current_ctx=ctx,
                               neg_sampling=dict(mode="binary", amount=amount))


def test_input_time_without_time_attr_is_refused_as_pyg_does(timed):
    _, stores, ctx = timed
    with pytest.raises(ValueError, match=r"conflicting 'input_time' and 'time_attr'"):
        DistNeighborLoader(data=stores, num_neighbors=[2], input_nodes=torch.tensor([5, 6]),
                           input_time=torch.tensor([1, 2]), current_ctx=ctx)
    loader = DistNeighborLoader(data=stores, num_neighbors=[2], input_nodes=torch.tensor([5, 6]),
                                input_time=torch.tensor([1, 2]), time_attr="time",
                                batch_size=2, current_ctx=ctx)
    assert next(iter(loader)).batch_size == 2
    loader.close()


def test_edge_label_time_without_time_attr_is_refused_as_pyg_does(timed):
    _, stores, ctx = timed
    with pytest.raises(ValueError, match=r"conflicting 'edge_label_time' and 'time_attr'"):
        DistLinkNeighborLoader(data=stores, num_neighbors=[2],
                               edge_label_index=torch.tensor([[0, 1], [1, 2]]),
                               edge_label_time=torch.tensor([1, 2]), current_ctx=ctx)


@pytest.mark.parametrize("loader", ["node", "link"])
def test_a_time_attr_that_is_not_a_time_is_refused(timed, loader):
    """``x`` is a float feature matrix, not one integer time per node."""
    _, stores, ctx = timed
    cls = DistNeighborLoader if loader == "node" else DistLinkNeighborLoader
    with pytest.raises(ValueError, match=r"time_attr='x' must hold one integer time per "
                                         r"node or edge: node type '_N' stores float32 rows "
                                         r"of shape \[\d+\]"):
        cls(data=stores, num_neighbors=[2], time_attr="x", current_ctx=ctx)
