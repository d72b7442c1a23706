"""The last hop written straight into the batch's final [2, E] edge tensor: the
destination fill (``repeat_into``), ``NodeIndex.insert(out=)``, and HopState's output
with ``num_hops`` equal to the concatenation of every hop's pieces (``num_hops=None``)."""
import pytest
import torch

from pyg_dist.sampler._hop_state import EdgePiece, HopState, edge_index, repeat_into
from pyg_dist.sampler._node_index import NodeIndex

T = torch.tensor
AA, AB, BA = ("a", "to", "a"), ("a", "to", "b"), ("b", "to", "a")  # (src, rel, dst)
NUM = {"a": 50, "b": 30}


@pytest.mark.parametrize("counts", [[2, 0, 3, 1], [0, 0, 0], [], [0, 5], [4, 0]])
def test_repeat_into_equals_repeat_interleave(counts):
    counts = T(counts, dtype=torch.long)
    values = torch.arange(counts.numel()) * 7 + 3
    expected = torch.repeat_interleave(values, counts)
    assert torch.equal(repeat_into(values, counts), expected)
    out = torch.full((2, expected.numel()), -9, dtype=torch.long)
    assert repeat_into(values, counts, out=out[1]).data_ptr() == out[1].data_ptr()
    assert torch.equal(out[1], expected) and (out[0] == -9).all()  # only its own row


def test_repeat_into_random_against_repeat_interleave():
    g = torch.Generator().manual_seed(3)
    values = torch.randint(0, 1 << 40, (1000,), generator=g)
    counts = torch.randint(0, 4, (1000,), generator=g)  # a quarter are zero
    assert torch.equal(repeat_into(values, counts), torch.repeat_interleave(values, counts))
    narrow = repeat_into(values[:10].int(), counts[:10].int())  # other int types: int64
    assert narrow.dtype == torch.long
    assert torch.equal(narrow, torch.repeat_interleave(values[:10].int(), counts[:10]).long())


def test_repeat_into_refuses_bad_input():
    with pytest.raises(ValueError, match="non-negative"):
        repeat_into(T([1, 2]), T([1, -1]))
    with pytest.raises(ValueError, match="add up to 4"):
        repeat_into(T([1, 2]), T([1, 2]), out=torch.empty(4, dtype=torch.long))
    with pytest.raises(ValueError, match="one count per value"):
        repeat_into(T([1, 2, 3]), T([1, 2]))
    with pytest.raises(ValueError, match="int64"):
        repeat_into(T([1]), T([2]), out=torch.empty(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="contiguous"):
        repeat_into(T([1]), T([2]), out=torch.empty(2, 2, dtype=torch.long)[:, 0])


@pytest.mark.parametrize("bound", [None, 1000])  # hashed, direct table
def test_insert_writes_positions_into_out(bound):
    keys = T([7, 3, 7, 900, 3, 5] * 40)
    plain = NodeIndex(2, bound)  # grows while inserting: out keeps what was written
    expected = plain.insert(keys)
    both = torch.full((2, keys.numel()), -5, dtype=torch.long)
    index = NodeIndex(2, bound)
    got = index.insert(keys, out=both[0])
    assert got.data_ptr() == both[0].data_ptr() and torch.equal(both[0], expected)
    assert (both[1] == -5).all() and torch.equal(index.keys, plain.keys)
    with pytest.raises(ValueError, match="non-negative"):  # refused: out is left alone
        index.insert(T([1, -1]), out=both[1, :2])
    assert (both[1] == -5).all() and len(index) == 4
    for bad in (torch.empty(3, dtype=torch.long), torch.empty(2, dtype=torch.int32),
                torch.empty(2, 2, dtype=torch.long)[:, 0], [0, 0]):
        with pytest.raises(ValueError, match="out must be"):
            index.insert(T([1, 2]), out=bad)


def _drive(num_hops, fanouts, seeds, disjoint=False, split=False, original=False):
    """Runs ``len`` of the fan-outs hops of made-up neighbours (a seed may draw none)
    through a HopState as the sampler's merge does (add_hop_edges, one piece per
    partition: two when ``split``), and returns its output."""
    hops = len(next(iter(fanouts.values())))
    state = HopState(seeds, disjoint, original_eids=original, num_hops=num_hops,
                     seed_time={t: torch.zeros(s.numel()) for t, s in seeds.items()}
                     if disjoint else None)
    for hop in range(hops):
        sampled = {}
        for k, (edge_type, fans) in enumerate(fanouts.items()):
            sampled[edge_type] = 0
            front = state.frontier.get(edge_type[2])
            if fans[hop] == 0 or front is None:
                continue
            g = torch.Generator().manual_seed(100 * hop + k)
            n = front.local.numel()
            counts = torch.randint(0, fans[hop] + 1, (n,), generator=g)
            nbrs = torch.randint(0, NUM[edge_type[0]], (int(counts.sum()),), generator=g)
            eids = torch.randint(0, 1 << 20, (nbrs.numel(),), generator=g)
            owner = torch.arange(n) % 2 if split else torch.zeros(n, dtype=torch.long)
            starts = torch.cumsum(counts, 0) - counts
            pieces = []
            for p in range(2 if split else 1):
                pos = (owner == p).nonzero().view(-1)
                take = torch.cat([torch.arange(int(starts[i]), int(starts[i] + counts[i]))
                                  for i in pos.tolist()] + [torch.zeros(0, dtype=torch.long)])
                batch = (torch.repeat_interleave(front.batch[pos], counts[pos])
                         if front.batch is not None else None)
                pieces.append(EdgePiece(None, nbrs[take], eids[take], batch,
                                        eids[take] + 7 if original else None,
                                        front.local[pos], counts[pos]))
            sampled[edge_type] = state.add_hop_edges(edge_type, pieces)
        state.end_hop(sampled)
    out = state.output(list(fanouts))
    state.release()
    return out


def _same(a, b):
    assert a.node.keys() == b.node.keys()
    for t in a.node:
        assert torch.equal(a.node[t], b.node[t])
    for field in ("row", "col", "edge"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.keys() == y.keys()
        for t in x:
            assert x[t].dtype == y[t].dtype and torch.equal(x[t], y[t]), (field, t)
    assert a.num_sampled_nodes == b.num_sampled_nodes
    assert a.num_sampled_edges == b.num_sampled_edges
    assert (a.batch is None) == (b.batch is None)
    for t in a.batch or {}:
        assert torch.equal(a.batch[t], b.batch[t])
    assert (a.original_edge is None) == (b.original_edge is None)
    for t in a.original_edge or {}:
        assert torch.equal(a.original_edge[t], b.original_edge[t])


def _one_exact_tensor(out, edge_type):
    """The edge type's rows are the two rows of one [2, E] tensor of exactly E edges."""
    row, col = out.row[edge_type], out.col[edge_type]
    both = edge_index(row, col)
    assert both.data_ptr() == row.data_ptr()  # no copy
    assert both.untyped_storage().nbytes() == 2 * row.numel() * 8


CASES = {
    "homo 1 hop": (dict(fanouts={AA: [4]}, seeds={"a": T([3, 9, 1])})),
    "homo 3 hops": (dict(fanouts={AA: [3, 2, 3]}, seeds={"a": T([3, 9, 1])})),
    # AB is absent from the last hop, BA only reached from hop 2 on
    "hetero": (dict(fanouts={AA: [2, 2, 3], AB: [3, 2, 0], BA: [0, 2, 2]},
                    seeds={"a": T([4, 0]), "b": T([1])})),
    "disjoint": (dict(fanouts={AA: [3, 2, 3]}, seeds={"a": T([3, 3, 1])}, disjoint=True)),
    "two partitions": (dict(fanouts={AA: [3, 3], AB: [2, 2], BA: [2, 2]},
                            seeds={"a": T([3, 9, 1]), "b": T([0, 2, 4])},
                            split=True, original=True)),
    "original ids": (dict(fanouts={AA: [2, 3]}, seeds={"a": T([5, 6, 7])}, original=True)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_last_hop_into_the_final_tensor_equals_the_concatenation(case):
    kw = CASES[case]
    hops = len(next(iter(kw["fanouts"].values())))
    old, new = _drive(None, **kw), _drive(hops, **kw)
    _same(new, old)
    assert new.row[AA].numel() > 0 and new.num_sampled_edges[AA][-1] > 0
    for edge_type, fans in kw["fanouts"].items():
        if fans[-1] and new.row[edge_type].numel():
            _one_exact_tensor(new, edge_type)
    if case == "hetero":  # not sampled in the last hop: its earlier pieces concatenated
        assert new.num_sampled_edges[AB][-1] == 0 and new.row[AB].numel() > 0
        assert torch.equal(edge_index(new.row[AB], new.col[AB]),
                           torch.stack([old.row[AB], old.col[AB]]))


def test_last_hop_by_hand():
    """Two hops, the second written into the final tensor, checked by hand; a second
    piece of the last hop and a hop beyond ``num_hops`` are concatenated after it."""
    state = HopState({"a": T([5, 7])}, disjoint=False, num_hops=2)
    state.add_edges(AA, col=T([0, 0, 1]), nbrs=T([7, 9, 3]), eids=T([10, 11, 12]), batch=None)
    state.end_hop({AA: 3})
    state.add_hop_edges(AA, [EdgePiece(None, T([5, 11, 11]), T([20, 21, 22]), None, None,
                                       T([2, 3]), T([1, 2]))])
    first = state.rows[AA][0]
    assert first._base is not None and first._base.shape == (2, 6)  # written in place
    state.end_hop({AA: 3})
    assert state.frontier == {}  # nothing samples from the last hop's nodes: not copied
    out = state.output([AA])
    assert out.row[AA].data_ptr() == first.data_ptr()  # the output is that tensor
    assert out.num_sampled_nodes["a"] == [2, 2, 1]  # the last hop's new node counted
    assert out.node["a"].tolist() == [5, 7, 9, 3, 11]
    assert out.row[AA].tolist() == [1, 2, 3, 0, 4, 4]
    assert out.col[AA].tolist() == [0, 0, 1, 2, 3, 3]
    assert out.edge[AA].tolist() == [10, 11, 12, 20, 21, 22]

    state = HopState({"a": T([5, 7])}, disjoint=False, num_hops=1)
    state.add_edges(AA, col=T([0, 1]), nbrs=T([7, 8]), eids=T([1, 2]), batch=None)
    state.add_edges(AA, col=T([1]), nbrs=T([5]), eids=T([3]), batch=None)  # same hop
    state.end_hop({AA: 3})
    state.add_edges(AA, col=T([2]), nbrs=T([9]), eids=T([4]), batch=None)  # beyond
    state.end_hop({AA: 1})
    out = state.output([AA])
    assert out.row[AA].tolist() == [1, 2, 0, 3] and out.col[AA].tolist() == [0, 1, 1, 2]
    assert edge_index(out.row[AA], out.col[AA]).tolist() == [[1, 2, 0, 3], [0, 1, 1, 2]]
    assert out.edge[AA].tolist() == [1, 2, 3, 4]


def test_bad_last_hop_input_changes_nothing():
    state = HopState({"a": T([5, 7])}, disjoint=False, num_hops=1)
    with pytest.raises(ValueError, match="non-negative"):  # a negative count
        state.add_hop_edges(AA, [EdgePiece(None, T([1, 2]), T([0, 1]), None, None,
                                           T([0, 1]), T([3, -1]))])
    with pytest.raises(ValueError, match="add up to 2"):  # counts for other edges
        state.add_hop_edges(AA, [EdgePiece(None, T([1, 2]), T([0, 1]), None, None,
                                           T([0, 1]), T([1, 2]))])
    with pytest.raises(ValueError, match="2 destinations for 3"):
        state.add_edges(AA, col=T([0, 1]), nbrs=T([1, 2, 3]), eids=T([0, 1, 2]), batch=None)
    with pytest.raises(ValueError, match="non-negative"):  # a negative neighbour id
        state.add_edges(AA, col=T([0, 1]), nbrs=T([1, -2]), eids=T([0, 1]), batch=None)
    assert len(state.index["a"]) == 2 and not state.rows.get(AA) and not state.eids.get(AA)
    for bad in (-1, 1.0, True, "2"):
        with pytest.raises(ValueError, match="num_hops"):
            HopState({"a": T([5])}, disjoint=False, num_hops=bad)


def test_seed_runs_lays_the_destinations_out_in_a_given_row(monkeypatch):
    """Several partitions' last hop: the merged destinations are laid out straight in
    the final tensor's row (``col_out``), equal to those of a new column."""
    from pyg_dist.sampler import _hop_state
    from pyg_dist.sampler._runs import seed_runs

    seeds, counts = [T([0, 3, 4]), T([1, 2]), T([5])], [T([2, 0, 3]), T([1, 2]), T([0])]
    both = torch.full((2, 8), -1, dtype=torch.long)
    runs = seed_runs(seeds, counts, col_out=both[1])
    assert runs.col.data_ptr() == both[1].data_ptr()
    assert torch.equal(both[1], seed_runs(seeds, counts).col) and (both[0] == -1).all()
    for bad in (torch.empty(7, dtype=torch.long), torch.empty(8, dtype=torch.int32),
                torch.empty(8, 2, dtype=torch.long)[:, 0]):
        with pytest.raises(ValueError, match="col_out"):
            seed_runs(seeds, counts, col_out=bad)
    laid = []
    monkeypatch.setattr(_hop_state, "seed_runs", lambda *a, **k: laid.append(k) or
                        seed_runs(*a, **k))
    state = HopState({"a": T([10, 11, 12])}, disjoint=False, num_hops=1)
    pieces = [EdgePiece(None, T([5, 6]), T([0, 1]), None, None, T([0]), T([2])),
              EdgePiece(None, T([7]), T([2]), None, None, T([2]), T([1]))]
    assert state.add_hop_edges(AA, pieces) == 3
    assert laid[0]["col_out"].data_ptr() == state.cols[AA][0].data_ptr()  # in place
    state.end_hop({AA: 3})
    out = state.output([AA])
    assert out.col[AA].tolist() == [0, 0, 2] and out.edge[AA].tolist() == [0, 1, 2]
    assert out.node["a"][out.row[AA]].tolist() == [5, 6, 7]
