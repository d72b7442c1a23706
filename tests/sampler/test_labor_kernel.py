"""LABOR sampling: the kernel against the numpy reference, its statistics against exact
inclusion probabilities, and its options."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from pyg_dist.sampler import _labor as labor
from pyg_dist.sampler._labor import hop_seed, sample_labor_hop, type_seed, variates
from pyg_dist.sampler import labor_sample
from pyg_dist.sampler import SamplingConfig
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE


def _graph(n: int = 120, m: int = 1500, seed: int = 0, dup: bool = True):
    """A random CSC (with repeated edges when ``dup``) and every edge's id."""
    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)
    if dup:
        src[1::7], dst[1::7] = src[0::7][:src[1::7].numel()], dst[0::7][:dst[1::7].numel()]
    order = torch.argsort(dst, stable=True)
    colptr = torch.zeros(n + 1, dtype=torch.long)
    colptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return colptr, src[order], order


def _kernel(colptr, row, eid, seeds, fanout, random_seed, weights=None, layer=0):
    seed = type_seed(hop_seed(random_seed, layer), HOMO_NODE)
    return sample_labor_hop(colptr, row, row.to(torch.int32), seeds, fanout, seed,
                            weights=weights, edge_ids=eid, edge_values=True)


def test_numba_hash_equals_numpy_hash():
    keys = np.array([0, 1, 2, 2**31 - 1, 2**40, 12345], dtype=np.int64)
    r = variates(keys, 99)
    assert bool(((r > 0) & (r < 1)).all()) and np.unique(r).size == keys.size
    colptr = torch.tensor([0, keys.size])  # one seed over all keys, all taken, by rank
    hop = sample_labor_hop(colptr, torch.arange(keys.size), torch.from_numpy(keys),
                           torch.tensor([0]), -1, 99, edge_values=True)
    assert hop.values.tolist() == np.argsort(r, kind="stable").tolist()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fanout", [-1, 0, 1, 4, 30])
def test_kernel_equals_reference(weighted, fanout):
    colptr, row, eid = _graph()
    w = None
    if weighted:
        w = torch.rand(row.numel(), generator=torch.Generator().manual_seed(1),
                       dtype=torch.float64)
        w[::4] = 0.0
    seeds = torch.randperm(120, generator=torch.Generator().manual_seed(2))[:60]
    for random_seed in (0, 7, 2**62 + 5):
        hop = _kernel(colptr, row, eid, seeds, fanout, random_seed, w)
        ref = labor_sample({HOMO_EDGE: (colptr, row, w, eid)}, {HOMO_NODE: seeds},
                           {HOMO_EDGE: [fanout]}, random_seed)
        dst, src, edge = ref.hops[0].get(HOMO_EDGE, (torch.empty(0, dtype=torch.long),) * 3)
        assert torch.equal(torch.repeat_interleave(seeds, hop.counts), dst)
        assert torch.equal(hop.nbrs, src) and torch.equal(hop.values, edge)
        deg = colptr[seeds + 1] - colptr[seeds]
        if w is not None:
            deg = torch.tensor([int((w[colptr[s]:colptr[s + 1]] > 0).sum()) for s in seeds])
            assert bool((w[hop.pos] > 0).all())
        assert torch.equal(hop.counts, deg if fanout < 0 else deg.clamp(max=fanout))


@pytest.mark.parametrize("fanout", [1, 2, 5])
def test_prefilter_below_2k_over_degree_keeps_the_reference_picks(fanout):
    """Rows of more than 2k edges keep only edges with r < 2k/degree before ranking; rows
    where fewer than k fall below it (the fallback to every edge) and rows where enough
    do both draw exactly the reference's edges, in order, repeated edges included."""
    colptr, row, eid = _graph(n=200, m=8000, seed=3)  # degree ~40, 1 in 7 edges repeated
    seeds = torch.arange(200)
    for random_seed in range(6):
        hop = _kernel(colptr, row, eid, seeds, fanout, random_seed)
        ref = labor_sample({HOMO_EDGE: (colptr, row, None, eid)}, {HOMO_NODE: seeds},
                           {HOMO_EDGE: [fanout]}, random_seed)
        dst, src, edge = ref.hops[0][HOMO_EDGE]
        assert torch.equal(torch.repeat_interleave(seeds, hop.counts), dst)
        assert torch.equal(hop.nbrs, src) and torch.equal(hop.values, edge)
    seed = type_seed(hop_seed(5, 0), HOMO_NODE)  # both paths were taken (last seed)
    r = variates(row.numpy(), seed)
    deg = (colptr[1:] - colptr[:-1]).numpy()
    per_edge = np.repeat(2 * fanout / np.maximum(deg, 1), deg)  # each edge's row's bound
    below = np.add.reduceat(r < per_edge, colptr[:-1].numpy())
    wide = deg > 2 * fanout
    assert ((below < fanout) & wide).any() and ((below >= fanout) & wide).any()


def test_seeds_with_shared_neighbours_pick_the_same_ones():
    """The point of LABOR: two seeds with the same candidates draw the same k."""
    colptr = torch.tensor([0, 20, 40])
    row = torch.cat([torch.arange(100, 120), torch.arange(100, 120).flip(0)])
    for random_seed in range(20):
        hop = _kernel(colptr, row, torch.arange(40), torch.tensor([0, 1]), 5, random_seed)
        a, b = hop.nbrs.view(2, 5)
        assert torch.equal(a, b)


def test_layer_dependency_shares_variates_across_layers():
    """Node 2 (layer 0) and node 1 (layer 1, reached from seed 0) have the same 30
    candidates: they pick the same ones exactly when the layers share variates."""
    cands = torch.arange(10, 40)
    colptr = torch.tensor([0, 1, 31, 61] + [61] * 37)
    row = torch.cat([torch.tensor([1]), cands, cands.flip(0)])
    graphs = {HOMO_EDGE: (colptr, row)}
    same = 0
    for random_seed in range(10):
        picks = {}
        for dependent in (False, True):
            out = labor_sample(graphs, {HOMO_NODE: torch.tensor([0, 2])},
                               {HOMO_EDGE: [3, 3]}, random_seed, dependent)
            dst0, src0, _ = out.hops[0][HOMO_EDGE]
            dst1, src1, _ = out.hops[1][HOMO_EDGE]
            picks[dependent] = (set(src0[dst0 == 2].tolist()), set(src1[dst1 == 1].tolist()))
        assert picks[True][0] == picks[True][1]
        same += picks[False][0] == picks[False][1]
    assert same <= 1  # independent layers: equal picks have probability 1/4060


def _inclusion(weights: np.ndarray, k: int, grid: int = 20000) -> np.ndarray:
    """Exact P(edge i is among the k smallest r_i / w_i), r_i iid U(0, 1), by integrating
    its density against the Poisson-binomial count of the others below it."""
    out = np.zeros(weights.size)
    for i, wi in enumerate(weights):
        x = (np.arange(grid) + 0.5) / (grid * wi)
        p = np.minimum(1.0, np.outer(x, np.delete(weights, i)))
        below = np.zeros((grid, k))
        below[:, 0] = 1.0
        for j in range(p.shape[1]):  # P(count == c) for c < k, one other edge at a time
            nxt = below * (1 - p[:, j:j + 1])
            nxt[:, 1:] += below[:, :-1] * p[:, j:j + 1]
            below = nxt
        out[i] = below.sum(1).mean()
    return out


def _chi_square(counts: np.ndarray, expected: np.ndarray) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("weighted", [False, True])
def test_inclusion_frequencies_match_exact_probabilities(weighted):
    """Over many batch seeds each seed's neighbours are drawn with the exact
    probabilities (k/d uniform); a sampler biased by position fails the bound."""
    d, k, trials = 8, 3, 6000
    colptr = torch.tensor([0, d, 2 * d])  # two seeds: the same candidates (shared r)
    row = torch.cat([torch.arange(d), torch.arange(d)])
    w = torch.tensor([1.0, 2.0, 3.0, 0.5, 1.0, 4.0, 2.5, 1.5] * 2, dtype=torch.float64)
    counts = np.zeros(d)
    for t in range(trials):
        hop = _kernel(colptr, row, torch.arange(2 * d), torch.tensor([0, 1]), k, 1000 + t,
                      w if weighted else None)
        counts += np.bincount(hop.pos[:k].numpy(), minlength=d)
        assert torch.equal(hop.nbrs[:k], hop.nbrs[k:])
    p = _inclusion(w[:d].numpy(), k) if weighted else np.full(d, k / d)
    assert abs(p.sum() - k) < 1e-3  # the exact probabilities are right
    bound = chi2.ppf(1 - 1e-4, d - 1)
    assert _chi_square(counts, trials * p) < bound
    first_k = np.zeros(d)
    first_k[:k] = trials  # what a sampler taking the first k would give
    assert _chi_square(first_k, trials * p) > bound
    if weighted:  # and uniform draws would fail the weighted bound
        assert _chi_square(np.full(d, trials * k / d), trials * p) > bound


def test_config_refuses_what_labor_does_not_support():
    types = [HOMO_EDGE]
    assert SamplingConfig.build([2], types, sampling_strategy="labor").is_labor
    with pytest.raises(ValueError, match="sampling_strategy must be one of"):
        SamplingConfig.build([2], types, sampling_strategy="layer")
    with pytest.raises(ValueError, match="layer_dependency=True needs"):
        SamplingConfig.build([2], types, layer_dependency=True)
    with pytest.raises(TypeError, match="layer_dependency must be True or False"):
        SamplingConfig.build([2], types, sampling_strategy="labor", layer_dependency="yes")
    for kwargs, name in ((dict(disjoint=True), "disjoint"), (dict(replace=True), "replace"),
                         (dict(time_attr="t", disjoint=True), "time_attr")):
        with pytest.raises(NotImplementedError, match=f"not supported with {name}"):
            SamplingConfig.build([2], types, sampling_strategy="labor", **kwargs)


def test_kernel_checks_its_key_arrays():
    colptr, row, eid = _graph(dup=False)
    with pytest.raises(ValueError, match="keys must hold one int64 or int32 per edge"):
        sample_labor_hop(colptr, row, row[:-1], torch.tensor([0]), 2, 1)
    with pytest.raises(ValueError, match="edge_ids must hold"):
        sample_labor_hop(colptr, row, row, torch.tensor([0]), 2, 1, edge_ids=eid.double())
    with pytest.raises(ValueError):
        sample_labor_hop(colptr, row, row, torch.tensor([10_000]), 2, 1)
    assert labor.batch_seed(np.random.default_rng(3)) == \
        labor.batch_seed(np.random.default_rng(3))


def test_integer_ranks_order_and_tie_as_the_float_variates():
    """Above 2^52 the variate's ``x + 0.5`` rounds half to even: 2m - 1 and 2m tie."""
    from pyg_dist.sampler._labor_kernels import rank_of_bits
    top = 2**53 - 1
    xs = [0, 1, 2, 2**52 - 2, 2**52 - 1, 2**52, 2**52 + 1, 2**52 + 2, 2**52 + 3,
          2**52 + 4, top - 2, top - 1, top]
    xs += np.random.default_rng(0).integers(0, 2**53, 2000).tolist()
    r = [(float(x) + 0.5) * 2.0**-53 for x in xs]
    ranks = [rank_of_bits(x) for x in xs]
    for i in range(len(xs)):
        for j in (i + 1, (i * 7 + 3) % len(xs)):
            j %= len(xs)
            assert (r[i] < r[j]) == (ranks[i] < ranks[j]) and \
                (r[i] == r[j]) == (ranks[i] == ranks[j]), (xs[i], xs[j])


@pytest.mark.parametrize("case", range(12))
def test_integer_path_equals_reference_on_ties_and_degrees_around_k(case):
    """Fan-outs up to 32 pick in integers: rows of degree around k, 2k and 4k (the
    filters and their fallbacks), few distinct sources (repeated edges: ties broken by
    source, then edge id, here random), fan-outs at the path's limit, and int64 keys."""
    gen = np.random.default_rng(case)
    fanout = [1, 2, 3, 5, 10, 15, 31, 32, 33, -1, 5, 10][case]
    k = max(fanout, 4)
    deg = gen.choice([0, 1, k - 1, k, k + 1, 2 * k, 2 * k + 1, 4 * k, 4 * k + 1, 9 * k,
                      600], 150)
    colptr = torch.from_numpy(np.concatenate([[0], np.cumsum(deg)]))
    space = [5, 40, 10**9][case % 3]  # 5 distinct sources: ties nearly everywhere
    row = torch.from_numpy(gen.integers(0, space, int(colptr[-1])))
    eid = torch.from_numpy(gen.permutation(row.numel()))
    seeds = torch.from_numpy(gen.permutation(150)[:100])
    keys = row if case % 2 else row.to(torch.int32)
    for random_seed in range(4):
        seed = type_seed(hop_seed(random_seed, 0), HOMO_NODE)
        hop = sample_labor_hop(colptr, row, keys, seeds, fanout, seed, edge_ids=eid,
                               edge_values=True)
        ref = labor_sample({HOMO_EDGE: (colptr, row, None, eid)}, {HOMO_NODE: seeds},
                           {HOMO_EDGE: [fanout]}, random_seed)
        dst, src, edge = ref.hops[0][HOMO_EDGE]
        assert torch.equal(torch.repeat_interleave(seeds, hop.counts), dst)
        assert torch.equal(hop.nbrs, src) and torch.equal(hop.values, edge)
