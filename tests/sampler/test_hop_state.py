"""HopState in one process: frontier, relabelling, disjoint keys and sampled counts."""
import pytest
import torch

from pyg_dist.sampler.hop_state import ID_BITS, HopState

AA, AB = ("a", "to", "a"), ("a", "to", "b")  # (src, rel, dst): a-neighbours of a / of b
T = torch.tensor


def test_relabel_frontier_and_counts():
    state = HopState({"a": T([5, 7])}, disjoint=False)
    assert state.frontier["a"].ids.tolist() == [5, 7]
    assert state.frontier["a"].local.tolist() == [0, 1]
    # hop 1: seed 5 (row 0) gets 7 and 9, seed 7 (row 1) gets 9 and 3
    state.add_edges(AA, col=T([0, 0, 1, 1]), nbrs=T([7, 9, 9, 3]), eids=T([10, 11, 12, 13]),
                    batch=None)
    state.end_hop({AA: 4, AB: 0})
    assert state.frontier["a"].ids.tolist() == [9, 3]      # only the new nodes
    assert state.frontier["a"].local.tolist() == [2, 3]
    # hop 2: 9 (row 2) gets 5 (seen) and 11 (new)
    state.add_edges(AA, col=T([2, 2]), nbrs=T([5, 11]), eids=T([20, 21]), batch=None)
    state.end_hop({AA: 2, AB: 0})
    out = state.output([AA, AB])
    assert out.node["a"].tolist() == [5, 7, 9, 3, 11]
    assert out.row[AA].tolist() == [1, 2, 2, 3, 0, 4]     # positions of the neighbours
    assert out.col[AA].tolist() == [0, 0, 1, 1, 2, 2]
    assert out.edge[AA].tolist() == [10, 11, 12, 13, 20, 21]
    assert out.num_sampled_nodes["a"] == [2, 2, 1]
    assert out.num_sampled_edges == {AA: [4, 2], AB: [0, 0]}
    assert out.row[AB].numel() == 0 and out.batch is None
    assert state.frontier["a"].ids.tolist() == [11]


def test_a_node_type_first_reached_later_gets_zero_counts_before():
    state = HopState({"b": T([0, 1])}, disjoint=False)
    state.end_hop({AB: 0, AA: 0})  # nothing sampled in hop 1
    assert state.frontier == {}
    state = HopState({"b": T([0, 1])}, disjoint=False)
    state.add_edges(AB, col=T([0, 1, 1]), nbrs=T([4, 4, 6]), eids=T([0, 1, 2]), batch=None)
    state.end_hop({AB: 3, AA: 0})
    assert state.frontier["a"].ids.tolist() == [4, 6] and "b" not in state.frontier
    state.add_edges(AA, col=T([0]), nbrs=T([8]), eids=T([9]), batch=None)
    state.end_hop({AB: 0, AA: 1})
    out = state.output([AA, AB])
    assert out.num_sampled_nodes == {"b": [2, 0, 0], "a": [0, 2, 1]}
    assert out.row[AB].tolist() == [0, 0, 1] and out.col[AB].tolist() == [0, 1, 1]
    assert out.num_sampled_edges == {AB: [3, 0], AA: [0, 1]}


def test_disjoint_keys_keep_subtrees_apart():
    seed_time = {"a": T([30, 10, 20])}
    state = HopState({"a": T([5, 5, 8])}, disjoint=True, seed_time=seed_time)
    front = state.frontier["a"]
    assert front.batch.tolist() == [0, 1, 2] and front.time.tolist() == [30, 10, 20]
    # subtrees 0 and 1 both reach node 9; subtree 2 reaches 5 (a seed of other subtrees)
    state.add_edges(AA, col=T([0, 1, 2, 2]), nbrs=T([9, 9, 5, 5]), eids=T([1, 2, 3, 3]),
                    batch=T([0, 1, 2, 2]))
    state.end_hop({AA: 4})
    front = state.frontier["a"]
    assert front.ids.tolist() == [9, 9, 5]
    assert front.batch.tolist() == [0, 1, 2]
    assert front.time.tolist() == [30, 10, 20]
    assert front.local.tolist() == [3, 4, 5]
    out = state.output([AA])
    assert out.node["a"].tolist() == [5, 5, 8, 9, 9, 5]
    assert out.batch["a"].tolist() == [0, 1, 2, 0, 1, 2]
    assert out.row[AA].tolist() == [3, 4, 5, 5]  # the repeated (5, subtree 2) is one node
    assert out.num_sampled_nodes["a"] == [3, 3]


def test_disjoint_ids_that_would_collide_with_the_subtree_bits_are_refused():
    with pytest.raises(ValueError, match="disjoint"):
        HopState({"a": T([1 << ID_BITS])}, disjoint=True)
    state = HopState({"a": T([1, 2])}, disjoint=True)
    with pytest.raises(ValueError, match="disjoint"):
        state.add_edges(AA, col=T([0]), nbrs=T([(1 << ID_BITS) + 1]), eids=T([0]),
                        batch=T([0]))
    with pytest.raises(ValueError, match="non-negative"):
        state.add_edges(AA, col=T([0]), nbrs=T([-1]), eids=T([0]), batch=T([0]))
