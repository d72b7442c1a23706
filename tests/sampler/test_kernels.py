"""Local one-hop kernels and the node index, against direct computations."""
import numpy as np
import pytest
import torch

from pyg_dist.sampler._sample_kernels import sample_one_hop
from pyg_dist.sampler._node_index import NodeIndex


def _csc(num_rows: int = 50, max_deg: int = 40, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_deg, (num_rows,), generator=g)
    deg[0], deg[1] = 0, 200  # an isolated row and a hub
    indptr = torch.zeros(num_rows + 1, dtype=torch.long)
    indptr[1:] = torch.cumsum(deg, 0)
    indices = torch.randint(1000, 2000, (int(indptr[-1]),), generator=g)
    return indptr, indices


def _check_grouping(indptr, indices, seeds, counts, nbrs, pos):
    assert counts.numel() == seeds.numel() and int(counts.sum()) == pos.numel()
    assert torch.equal(indices[pos], nbrs)
    for s, chunk in zip(seeds.tolist(), torch.split(pos, counts.tolist())):
        assert bool(((chunk >= indptr[s]) & (chunk < indptr[s + 1])).all())


@pytest.mark.parametrize("fanout", [-1, 0, 1, 5, 100])
def test_uniform_without_replacement(fanout):
    indptr, indices = _csc()
    seeds = torch.arange(50)
    counts, nbrs, pos, _ = sample_one_hop(indptr, indices, seeds, fanout, False, 3)
    _check_grouping(indptr, indices, seeds, counts, nbrs, pos)
    deg = indptr[1:] - indptr[:-1]
    want = deg if fanout < 0 else deg.clamp(max=fanout)
    assert torch.equal(counts, want)
    for chunk in torch.split(pos, counts.tolist()):
        assert chunk.unique().numel() == chunk.numel()


def test_with_replacement_draws_fanout_for_every_nonisolated_row():
    indptr, indices = _csc()
    counts, nbrs, pos, _ = sample_one_hop(indptr, indices, torch.arange(50), 7, True, 1)
    deg = indptr[1:] - indptr[:-1]
    assert torch.equal(counts, torch.where(deg > 0, 7, 0))
    _check_grouping(indptr, indices, torch.arange(50), counts, nbrs, pos)


def test_deterministic_per_seed_and_uniform_frequency():
    indptr, indices = _csc()
    a = sample_one_hop(indptr, indices, torch.tensor([1]), 10, False, 42)[2]
    b = sample_one_hop(indptr, indices, torch.tensor([1]), 10, False, 42)[2]
    assert torch.equal(a, b)
    # the hub (degree 200): each edge drawn with probability 10/200 per draw
    hits = torch.zeros(200)
    draws = 2000
    for r in range(draws):
        pos = sample_one_hop(indptr, indices, torch.tensor([1]), 10, False, r)[2]
        hits[pos - indptr[1]] += 1
    freq = hits / draws  # expected 0.05; binomial std ~0.0049, bound at ~6 std
    assert float((freq - 0.05).abs().max()) < 0.03


def test_weighted_never_draws_zero_weight():
    indptr, indices = _csc()
    w = torch.rand(indices.numel(), generator=torch.Generator().manual_seed(1))
    w[::3] = 0
    for replace in (False, True):
        counts, _, pos, _ = sample_one_hop(indptr, indices, torch.arange(50), 5, replace, 0,
                                        weights=w)
        assert pos.numel() > 0 and bool((w[pos] > 0).all())
        nonzero = torch.tensor([int((w[indptr[i]:indptr[i + 1]] > 0).sum()) for i in range(50)])
        assert torch.equal(counts, nonzero.clamp(max=5) if not replace
                           else torch.where(nonzero > 0, 5, 0))


def test_weighted_prefers_heavy_edges():
    indptr = torch.tensor([0, 100])
    indices = torch.arange(100)
    w = torch.ones(100)
    w[:10] = 50.0
    hits = torch.zeros(100)
    for r in range(300):
        hits[sample_one_hop(indptr, indices, torch.tensor([0]), 5, False, r)[2]] += 0
        hits[sample_one_hop(indptr, indices, torch.tensor([0]), 5, False, r, weights=w)[2]] += 1
    assert hits[:10].sum() > 0.8 * hits.sum()


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_temporal_never_newer_than_seed(strategy):
    indptr, indices = _csc()
    times = torch.randint(0, 100, (indices.numel(),), generator=torch.Generator().manual_seed(2))
    seeds = torch.arange(50).repeat(2)
    seed_time = torch.randint(0, 100, (100,), generator=torch.Generator().manual_seed(3))
    counts, _, pos, _ = sample_one_hop(indptr, indices, seeds, 4, False, 0, edge_time=times,
                                    seed_time=seed_time, temporal_strategy=strategy)
    owner = torch.repeat_interleave(seed_time, counts)
    assert bool((times[pos] <= owner).all())
    for i, chunk in enumerate(torch.split(pos, counts.tolist())):
        s = int(seeds[i])
        valid = torch.arange(int(indptr[s]), int(indptr[s + 1]))
        valid = valid[times[valid] <= seed_time[i]]
        assert chunk.numel() == min(4, valid.numel())
        if strategy == "last" and chunk.numel():
            assert int(times[chunk].min()) >= int(times[valid].sort().values[-chunk.numel()])


def test_bad_inputs_raise():
    indptr, indices = _csc()
    with pytest.raises(ValueError, match=r"seeds must lie in \[0, 50\)"):
        sample_one_hop(indptr, indices, torch.tensor([50]), 5, False, 0)
    with pytest.raises(ValueError, match="fanout must be -1"):
        sample_one_hop(indptr, indices, torch.tensor([0]), -2, False, 0)
    with pytest.raises(ValueError, match="weights has 3 values"):
        sample_one_hop(indptr, indices, torch.tensor([0]), 5, False, 0, weights=torch.ones(3))
    with pytest.raises(ValueError, match="needs both edge_time and seed_time"):
        sample_one_hop(indptr, indices, torch.tensor([0]), 5, False, 0,
                       edge_time=torch.zeros(indices.numel(), dtype=torch.long))


def test_node_index_dedupes_in_first_appearance_order_and_grows():
    index = NodeIndex(4)
    rng = np.random.default_rng(0)
    seen = {}
    for _ in range(20):
        keys = torch.from_numpy(rng.integers(0, 500, 300))
        got = index.insert(keys)
        for k, v in zip(keys.tolist(), got.tolist()):
            assert seen.setdefault(k, len(seen)) == v
    assert len(index) == len(seen)
    assert index.keys.tolist() == list(seen)
    assert index.lookup(torch.tensor([next(iter(seen)), 10**12])).tolist() == [0, -1]
    with pytest.raises(ValueError, match="non-negative"):
        index.insert(torch.tensor([-1]))


# ---- temporal "last" with replacement (pyg-lib semantics) ------------------------------
def _one_row(times):
    indices = torch.arange(100, 100 + len(times))
    return torch.tensor([0, len(times)]), indices, torch.tensor(times)


def test_temporal_last_with_replacement_draws_among_the_most_recent():
    """pyg-lib's "last": the window is the min(k, m) most recent eligible edges; with
    replacement it then draws k times from that window (without: takes the window)."""
    indptr, indices, times = _one_row([5, 1, 9, 3, 7, 20, 30])  # 20 and 30 are too new
    seed, seed_time = torch.tensor([0, 0]), torch.tensor([10, 4])  # m = 5 and m = 2
    for k in (3, 8):
        counts, _, pos, _ = sample_one_hop(indptr, indices, seed, k, True, 5, edge_time=times,
                                        seed_time=seed_time, temporal_strategy="last")
        assert counts.tolist() == [k, k]
        first, second = pos.split(counts.tolist())
        window = {0: [2, 4, 0, 3, 1][:min(k, 5)], 1: [3, 1]}  # most recent eligible first
        assert set(first.tolist()) <= set(window[0])
        assert set(second.tolist()) <= set(window[1])
        counts, _, pos, _ = sample_one_hop(indptr, indices, seed, k, False, 5, edge_time=times,
                                        seed_time=seed_time, temporal_strategy="last")
        assert counts.tolist() == [min(k, 5), 2]
        first, second = pos.split(counts.tolist())
        assert sorted(first.tolist()) == sorted(window[0]) and sorted(second.tolist()) == [1, 3]


def test_temporal_last_with_replacement_covers_the_window():
    indptr, indices, times = _one_row([1, 2, 3])
    counts, _, pos, _ = sample_one_hop(indptr, indices, torch.zeros(200, dtype=torch.long), 5,
                                    True, 0, edge_time=times,
                                    seed_time=torch.full((200,), 10), temporal_strategy="last")
    assert counts.tolist() == [5] * 200 and sorted(set(pos.tolist())) == [0, 1, 2]


# ---- inconsistent CSC arrays are rejected before any kernel runs ------------------------
BAD_CSC = {
    "row pointer jumps past the edges": (torch.tensor([0, 10**9, 10]), "non-decreasing"),
    "last pointer past the edges": (torch.tensor([0, 3, 10**8]), r"indptr\[-1\]"),
    "pointer decreases": (torch.tensor([0, 8, 2, 10]), "non-decreasing"),
    "first pointer not 0": (torch.tensor([-(10**9), 5, 10]), r"indptr\[0\]"),
    "int32 row pointer": (torch.tensor([0, 5, 10], dtype=torch.int32), "int64"),
    "2-D row pointer": (torch.tensor([[0, 5, 10]]), "1-D"),
}


@pytest.mark.parametrize("case", list(BAD_CSC))
@pytest.mark.parametrize("weighted", [False, True])
def test_inconsistent_csc_is_rejected(case, weighted):
    indptr, match = BAD_CSC[case]
    indices = torch.arange(10)
    seeds = torch.tensor([0, 1]) if indptr.dim() == 1 else torch.tensor([0])
    weights = torch.ones(10) if weighted else None
    with pytest.raises(ValueError, match=match):
        sample_one_hop(indptr, indices, seeds, 5, False, 0, weights=weights)


def test_bad_indices_seeds_and_edge_arrays_are_rejected():
    indptr = torch.tensor([0, 5, 10])
    cases = [
        (dict(indices=torch.arange(10).view(2, 5)), "indices must be a 1-D"),
        (dict(indices=torch.arange(10).float()), "indices must be a 1-D"),
        (dict(seeds=torch.tensor([0.0, 1.0])), "seeds must be a 1-D integer"),
        (dict(seeds=torch.tensor([-1])), r"seeds must lie in \[0, 2\)"),
        (dict(seeds=torch.tensor([2**40])), r"seeds must lie in \[0, 2\)"),
        (dict(edge_time=torch.zeros(9, dtype=torch.long), seed_time=torch.zeros(2)),
         "edge_time has 9 values"),
        (dict(edge_time=torch.zeros(10, dtype=torch.long), seed_time=torch.zeros(3)),
         "seed_time has 3 values"),
        (dict(weights=torch.ones(11)), "weights has 11 values"),
    ]
    for change, match in cases:
        args = dict(indices=torch.arange(10), seeds=torch.tensor([0, 1]))
        args.update(change)
        with pytest.raises(ValueError, match=match):
            sample_one_hop(indptr, args.pop("indices"), args.pop("seeds"), 3, False, 0, **args)


def test_csc_check_is_remembered_until_the_arrays_change():
    from pyg_dist.sampler import _checks as checks

    indptr, indices = _csc()
    sample_one_hop(indptr, indices, torch.arange(3), 2, False, 0)
    assert checks.csc_checked(indptr, indices)
    indptr[5] = indptr[4] - 1  # in place: checked again, and refused
    assert not checks.csc_checked(indptr, indices)
    with pytest.raises(ValueError, match="non-decreasing"):
        sample_one_hop(indptr, indices, torch.arange(3), 2, False, 0)


def test_any_rng_seed_works_and_compiles_one_signature():
    from pyg_dist.sampler._sample_kernels import _uniform_sample

    indptr, indices = _csc()
    runs = [sample_one_hop(indptr, indices, torch.arange(50), 3, False, s)[2]
            for s in (7, -1, 2**64 - 1, 2**63 + 5)]
    assert torch.equal(runs[1], runs[2])  # the seed is taken modulo 2^64
    assert len({str(s[5]) for s in _uniform_sample.signatures}) == 1  # always uint64


def test_top_k_ranks_like_a_stable_sort():
    """The bounded-heap selection behind temporal "last" and weighted draws: the k
    highest keys, ties to the later position, lowest first (as a stable sort's tail)."""
    from pyg_dist.sampler._sample_kernels import _top_k

    rng = np.random.default_rng(0)
    for _ in range(200):
        m = int(rng.integers(0, 40))
        k = int(rng.integers(0, m + 1))
        for keys in (rng.integers(0, 5, m), rng.random(m)):
            want = np.argsort(keys, kind="stable")[m - k:]
            assert _top_k(keys, k).tolist() == want.tolist()


def test_edge_values_are_read_at_the_drawn_positions():
    """The edges' original ids come with the draw (uniform: in the neighbours' pass;
    weighted and temporal: after it), equal to the table at the drawn positions, and
    the draw itself is unchanged."""
    indptr, indices = _csc(60, seed=7)
    values = torch.randperm(10 * indices.numel())[:indices.numel()]
    seeds = torch.arange(60)
    weights = torch.rand(indices.numel()) + 0.1
    times = torch.randint(0, 50, (indices.numel(),))
    cases = [dict(), dict(weights=weights),
             dict(edge_time=times, seed_time=torch.full((60,), 25))]
    for kwargs in cases:
        for replace in (False, True):
            plain = sample_one_hop(indptr, indices, seeds, 4, replace, 9, **kwargs)
            for table in (values, values.to(torch.int32)):  # id files store int32 ids
                hop = sample_one_hop(indptr, indices, seeds, 4, replace, 9,
                                     edge_values=table, **kwargs)
                assert plain.values is None and hop.values.dtype == torch.int64
                assert torch.equal(hop.pos, plain.pos) and torch.equal(hop.nbrs, plain.nbrs)
                assert hop.pos.numel() > 0 and torch.equal(hop.values, values[hop.pos])
    drawn = sample_one_hop(indptr, indices, seeds, 4, False, 9, edge_values=values).values
    room = torch.full((drawn.numel() + 3,), -1)
    hop = sample_one_hop(indptr, indices, seeds, 4, False, 9, edge_values=values,
                         values_out=room)  # drawn into the front of the caller's buffer
    assert hop.values.data_ptr() == room.data_ptr() and torch.equal(hop.values, drawn)
    assert (room[drawn.numel():] == -1).all()
    short = torch.full((drawn.numel() - 1,), -1)  # too short: left alone
    hop = sample_one_hop(indptr, indices, seeds, 4, False, 9, edge_values=values,
                         values_out=short)
    assert torch.equal(hop.values, drawn) and (short == -1).all()
    for bad_out in (room.int(), room.view(1, -1), room[::2]):
        with pytest.raises(ValueError, match="values_out must be a contiguous 1-D int64"):
            sample_one_hop(indptr, indices, seeds, 4, False, 9, edge_values=values,
                           values_out=bad_out)
    for bad in (values[:-1], values.to(torch.int16), values.view(-1, 1)):
        with pytest.raises(ValueError, match="edge_values must be a 1-D int64 or int32"):
            sample_one_hop(indptr, indices, seeds, 4, False, 9, edge_values=bad)


def test_edge_offset_turns_positions_into_global_edge_ids():
    """``edge_offset`` is added to every drawn position (in the uniform kernel's own
    pass, after the weighted and temporal draws), the draw itself unchanged."""
    indptr, indices = _csc(40, seed=3)
    values = torch.arange(indices.numel()) * 3
    seeds = torch.arange(40)
    weights = torch.rand(indices.numel()) + 0.1
    times = torch.randint(0, 50, (indices.numel(),))
    for kwargs in (dict(), dict(edge_values=values), dict(weights=weights),
                   dict(edge_time=times, seed_time=torch.full((40,), 25))):
        for replace in (False, True):
            plain = sample_one_hop(indptr, indices, seeds, 3, replace, 5, **kwargs)
            moved = sample_one_hop(indptr, indices, seeds, 3, replace, 5, edge_offset=1000,
                                   **kwargs)
            assert plain.pos.numel() > 0 and torch.equal(moved.pos, plain.pos + 1000)
            assert torch.equal(moved.nbrs, plain.nbrs) and torch.equal(moved.counts, plain.counts)
            if "edge_values" in kwargs:
                assert torch.equal(moved.values, values[plain.pos])
