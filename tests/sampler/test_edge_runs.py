"""seed_runs / take_runs: one hop's pieces of several partitions in merged order."""
import pytest
import torch

from pyg_dist.sampler._runs import seed_runs, take_runs


def T(values):
    return torch.tensor(values, dtype=torch.long)


def _by_permutation(seeds, counts, values):
    """The merged order by scattering every edge (the reference)."""
    s, c = torch.cat(seeds), torch.cat(counts)
    runs = list(zip(s.tolist(), torch.cumsum(c, 0).sub(c).tolist(), c.tolist()))
    return [v for _, start, n in sorted(runs) for v in values[start:start + n].tolist()]


def test_runs_are_sorted_by_destination_and_kept_whole():
    seeds, counts = [T([0, 3, 4]), T([1, 2]), T([5])], [T([2, 0, 3]), T([1, 2]), T([0])]
    runs = seed_runs(seeds, counts)
    values = T([10, 11, 40, 41, 42, 20, 30, 31])
    assert runs.total == 8
    assert runs.col.tolist() == [0, 0, 1, 2, 2, 4, 4, 4]
    assert take_runs(values, runs).tolist() == [10, 11, 20, 30, 31, 40, 41, 42]


def test_take_runs_matches_the_permutation_on_random_pieces():
    g = torch.Generator().manual_seed(3)
    perm = torch.randperm(500, generator=g)
    seeds = [perm[:200].sort().values, perm[200:260].sort().values, perm[260:].sort().values]
    counts = [torch.randint(0, 7, (s.numel(),), generator=g) for s in seeds]
    values = torch.randint(0, 1 << 40, (int(sum(c.sum() for c in counts)),), generator=g)
    runs = seed_runs(seeds, counts)
    assert take_runs(values, runs).tolist() == _by_permutation(seeds, counts, values)
    out = torch.empty_like(values)
    assert take_runs(values.clone(), runs, out=out) is out


def test_bad_runs_are_refused_before_the_kernel():
    with pytest.raises(ValueError, match="negative edge count"):
        seed_runs([T([0, 1])], [T([2, -1])])
    with pytest.raises(ValueError, match="destinations but"):
        seed_runs([T([0, 1])], [T([2])])
    runs = seed_runs([T([0])], [T([2])])
    with pytest.raises(ValueError, match="values for 2 edges"):
        take_runs(T([1, 2, 3]), runs)
    with pytest.raises(ValueError, match="output"):
        take_runs(T([1, 2]), runs, out=torch.empty(3, dtype=torch.long))


@pytest.mark.parametrize("how", ["a range, offset", "gaps", "a repeat filling the count"])
def test_runs_are_placed_or_sorted_as_a_stable_sort_orders_them(how):
    """Destinations that fill a range are placed without a sort; others (gaps, or a
    repeated one, which the callers never send) take the sort: both give the order and
    the repeated destinations of a stable sort."""
    g = torch.Generator().manual_seed(5)
    base = torch.randperm(300, generator=g) + 1000
    if how == "gaps":
        base = base * 3
    if how == "a repeat filling the count":  # 1000..1299 in 300 values, 1151 twice
        base[base == 1150] = 1151
    seeds = [base[:120].sort().values, base[120:].sort().values]
    counts = [torch.randint(0, 5, (s.numel(),), generator=g) for s in seeds]
    runs = seed_runs(seeds, counts)
    s, c = torch.cat(seeds), torch.cat(counts)
    order = torch.argsort(s, stable=True)
    assert runs.order.tolist() == order.tolist()
    assert runs.col.tolist() == torch.repeat_interleave(s[order], c[order]).tolist()
    assert runs.starts.tolist() == (torch.cumsum(c, 0) - c).tolist()
    values = torch.randint(0, 1 << 40, (runs.total,), generator=g)
    assert take_runs(values, runs).tolist() == _by_permutation(seeds, counts, values)
