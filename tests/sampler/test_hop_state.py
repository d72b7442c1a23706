"""HopState in one process: frontier, relabelling, disjoint keys, sampled counts and the
column of original edge ids."""
import pytest
import torch

from pyg_dist.sampler._hop_state import ID_BITS, Column, EdgePiece, HopState
from pyg_dist.sampler._sample_kernels import sample_one_hop
from pyg_dist.sampler._types import HopRequest, HopResponse

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


def test_a_column_copies_pieces_and_takes_up_a_spare_drawn_in_place():
    col = Column(4)
    col.append(T([1, 2, 3]))
    spare = col.spare(5)  # grows (3 + 5 > 4), keeping what it held
    assert spare.numel() >= 5 and col.data[:3].tolist() == [1, 2, 3]
    spare[:2] = T([40, 41])  # a kernel drew two values in place
    before = col.data.data_ptr()
    col.append(spare[:2])
    col.append(T([7]))  # another owner's piece is copied on
    out = col.result()
    assert out.tolist() == [1, 2, 3, 40, 41, 7] and col.data.data_ptr() == before
    assert col.peak == 8
    wasteful = Column(100)
    wasteful.append(T([5, 6]))
    assert wasteful.result().tolist() == [5, 6]
    assert wasteful.result().untyped_storage().nbytes() == 16  # a copy, not the 800 bytes


def test_own_hops_draw_original_edge_ids_into_the_batch_without_a_concatenation():
    """The sampler's own part of a hop draws its edges' original ids straight into the
    batch's column; a peer's piece is copied after it; the next batch starts with the
    room this one needed, so its column is the very memory its hop drew into."""
    indptr, indices = T([0, 3, 5, 9]), T([1, 2, 0, 0, 2, 0, 1, 1, 2])
    table = T([90, 91, 92, 93, 94, 95, 96, 97, 98]).to(torch.int32)
    request = HopRequest([AA], [T([0, 1, 2])], [2], [None], False, "uniform", None, None, 3,
                         original_eids=True)
    hints = {}
    for batch in range(2):
        state = HopState({"a": T([0, 1, 2])}, disjoint=False, original_eids=True,
                         edge_hints=hints)
        spares = state.spares(request)
        hop = sample_one_hop(indptr, indices, T([0, 1, 2]), 2, False, 3, edge_values=table,
                             values_out=spares[0])
        assert hop.values.data_ptr() == spares[0].data_ptr()  # drawn in place
        assert torch.equal(hop.values, table[hop.pos].long())
        col = torch.repeat_interleave(T([0, 1, 2]), hop.counts)
        state.add_edges(AA, col, hop.nbrs, hop.pos, None, hop.values)
        state.add_edges(AA, T([0]), T([5]), T([100]), None, T([1234]))  # a peer's piece
        state.end_hop({AA: hop.nbrs.numel() + 1})
        out = state.output([AA])
        assert out.original_edge[AA].tolist() == table[hop.pos].tolist() + [1234]
        assert hints[AA] >= 7  # the room this batch needed, for the next one
    assert out.original_edge[AA].data_ptr() == hop.values.data_ptr()  # nothing copied
    assert HopState({"a": T([0])}, disjoint=False).spares(request) is None  # no ids kept


def test_hops_run_here_draw_one_after_another_into_the_batch():
    """Several hops run in this process in one hop round (own partition, then a partition
    read directly on this machine) each get room after what the ones before drew, even
    when the column grows between them: every piece lands where it is appended, in order,
    and the column equals their concatenation."""
    indptr, indices = T([0, 3, 5, 9]), T([1, 2, 0, 0, 2, 0, 1, 1, 2])
    table = T([90, 91, 92, 93, 94, 95, 96, 97, 98]).to(torch.int32)
    for capacity in (0, 64):  # grows between the two requests / room for both from the start
        state = HopState({"a": T([0, 1, 2])}, disjoint=False, original_eids=True,
                         edge_hints={AA: capacity})
        pieces = []
        for rng_seed, seeds in ((3, T([0, 1, 2])), (4, T([2, 0]))):  # own, then direct
            request = HopRequest([AA], [seeds], [2], [None], False, "uniform", None, None,
                                 rng_seed, original_eids=True)
            spares = state.spares(request)
            hop = sample_one_hop(indptr, indices, seeds, 2, False, rng_seed,
                                 edge_values=table, values_out=spares[0])
            assert hop.values.data_ptr() == spares[0].data_ptr()  # drawn into its room
            state.drew(request, HopResponse([hop.counts], [hop.nbrs], [hop.pos], [hop.values]))
            pieces.append((seeds, hop))
        for seeds, hop in pieces:  # merged in the order the room was handed out
            state.add_edges(AA, torch.repeat_interleave(seeds, hop.counts), hop.nbrs, hop.pos,
                            None, hop.values)
        state.end_hop({AA: sum(h.nbrs.numel() for _, h in pieces)})
        column = state.original[AA]
        assert column.result().tolist() == [v for _, h in pieces for v in table[h.pos].tolist()]
        if capacity:  # nothing was copied: the second piece was drawn right after the first
            first = pieces[0][1].values
            assert first.data_ptr() == column.data.data_ptr()
            assert pieces[1][1].values.data_ptr() == column.data[first.numel():].data_ptr()
        assert state.spares(request)[0].data_ptr() == column.data[column.size:].data_ptr()


def test_output_edges_form_one_edge_index_without_a_copy():
    from pyg_dist.sampler._hop_state import edge_index

    state = HopState({"n": torch.tensor([0, 1])}, disjoint=False)
    state.add_edges(("n", "e", "n"), torch.tensor([0, 0, 1]), torch.tensor([5, 6, 5]),
                    torch.tensor([10, 11, 12]), None)
    state.add_edges(("n", "e", "n"), torch.tensor([1]), torch.tensor([7]),
                    torch.tensor([13]), None)
    state.end_hop({("n", "e", "n"): 4})
    sub = state.output([("n", "e", "n"), ("n", "f", "n")])
    row, col = sub.row[("n", "e", "n")], sub.col[("n", "e", "n")]
    both = edge_index(row, col)
    assert torch.equal(both, torch.stack([row, col]))
    assert both.data_ptr() == row.data_ptr()  # no copy
    assert torch.equal(col, torch.tensor([0, 0, 1, 1]))
    assert edge_index(sub.row[("n", "f", "n")], sub.col[("n", "f", "n")]).shape == (2, 0)
    other = torch.tensor([9, 8, 7, 6])  # separate tensors are stacked
    assert torch.equal(edge_index(row, other), torch.stack([row, other]))
    assert torch.equal(edge_index(col, row), torch.stack([col, row]))


def test_pieces_of_several_partitions_are_merged_in_frontier_order():
    """One hop's edges from several partitions (own piece drawn in place, a remote one
    copied) are recorded by destination, as a single machine samples them: nodes get
    the positions single-machine sampling gives them, and edges, edge ids and original
    ids (permuted inside the batch's column) follow the same order."""
    state = HopState({"a": T([10, 11, 12, 13])}, disjoint=False, original_eids=True,
                     edge_hints={AA: 64})
    request = HopRequest([AA], [T([0, 2])], [3], [None], False, "uniform", None, None, 1,
                         original_eids=True)
    room = state.spares(request)[0]
    room[:3] = T([500, 501, 502])  # the own partition drew seeds 0 and 2's edges here
    own = EdgePiece(col=T([0, 0, 2]), nbrs=T([20, 21, 22]), eids=T([0, 1, 2]), batch=None,
                    original=room[:3], seeds=T([0, 2]), counts=T([2, 1]))
    remote = EdgePiece(col=T([1, 3, 3]), nbrs=T([21, 23, 10]), eids=T([7, 8, 9]),
                       batch=None, original=T([600, 601, 602]), seeds=T([1, 3]),
                       counts=T([1, 2]))
    assert state.add_hop_edges(AA, [own, remote]) == 6
    state.end_hop({AA: 6})
    out = state.output([AA])
    assert out.node["a"].tolist() == [10, 11, 12, 13, 20, 21, 22, 23]
    assert out.col[AA].tolist() == [0, 0, 1, 2, 3, 3]
    assert out.node["a"][out.row[AA]].tolist() == [20, 21, 21, 22, 23, 10]
    assert out.edge[AA].tolist() == [0, 1, 7, 2, 8, 9]
    assert out.original_edge[AA].tolist() == [500, 501, 600, 502, 601, 602]
    assert out.num_sampled_nodes["a"] == [4, 4]


def test_pieces_with_no_edges_are_merged_around():
    """A piece whose destinations drew no edges takes no place in the merged order."""
    for first_empty in (True, False):
        state = HopState({"a": T([10, 11, 12])}, disjoint=False)
        none = torch.zeros(0, dtype=torch.long)
        empty = EdgePiece(None, none, none, None, None, T([1, 2]), T([0, 0]))
        one = EdgePiece(None, T([5, 6]), T([0, 1]), None, None, T([0]), T([2]))
        assert state.add_hop_edges(AA, [empty, one] if first_empty else [one, empty]) == 2
        state.end_hop({AA: 2})
        out = state.output([AA])
        assert out.col[AA].tolist() == [0, 0]
        assert out.node["a"][out.row[AA]].tolist() == [5, 6]
        assert out.edge[AA].tolist() == [0, 1]
