"""Would another on-disk layout make original edge ids cheaper per batch?

Returning original edge ids costs one read of ``edge_ids.pt`` per sampled edge, at the
positions the sampling kernel drew in ``indices`` (the CSC's source ids). This measures
that read alone, in a loop shaped like the kernel's neighbour pass (software prefetch
``PREFETCH_AHEAD`` ahead, as in :mod:`pyg_dist.sampler._sample_kernels`), for the layouts one
could store:

- ``nbrs``: the neighbours only (what a batch without original edge ids reads);
- ``sep64``/``sep32``: plus a separate table of int64 / int32 ids (today: int64);
- ``pairs``: neighbour and id interleaved in one table (one cache miss for both?).

Positions are drawn as the kernel draws them: ``--fanout`` of each seed's ``--degree``
contiguous edges, seeds at random rows. Prints one JSON line: medians in ms per
``--draws`` positions, and each layout's extra cost over ``nbrs``.

Example:
    python benchmarks/edge_id_layout.py --edges 2000000 20000000
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Callable, Dict, List

import numba
import numpy as np

from pyg_dist.sampler._sample_kernels import PREFETCH_AHEAD, prefetch


@numba.njit(cache=True)
def _nbrs(ind, pos, out):
    n = pos.shape[0]
    for j in range(n):
        if j + PREFETCH_AHEAD < n:
            prefetch(ind, pos[j + PREFETCH_AHEAD])
        out[j] = ind[pos[j]]


@numba.njit(cache=True)
def _separate(ind, val, pos, out, got):
    n = pos.shape[0]
    for j in range(n):
        if j + PREFETCH_AHEAD < n:
            prefetch(ind, pos[j + PREFETCH_AHEAD])
            prefetch(val, pos[j + PREFETCH_AHEAD])
        out[j] = ind[pos[j]]
        got[j] = val[pos[j]]


@numba.njit(cache=True)
def _pairs(pairs, pos, out, got):
    n = pos.shape[0]
    for j in range(n):
        if j + PREFETCH_AHEAD < n:
            prefetch(pairs, 2 * pos[j + PREFETCH_AHEAD])
        out[j] = pairs[2 * pos[j]]
        got[j] = pairs[2 * pos[j] + 1]


def draw(rng: np.random.Generator, edges: int, draws: int, fanout: int,
         degree: int) -> np.ndarray:
    """``fanout`` distinct positions of each of ``draws // fanout`` random rows of
    ``degree`` contiguous edges, row by row (the kernel's order)."""
    rows = rng.integers(0, edges // degree, draws // fanout) * degree
    offsets = np.argsort(rng.random((draws // fanout, degree)), axis=1)[:, :fanout]
    return (rows[:, None] + offsets).reshape(-1).astype(np.int64)


def measure(edges: int, args: argparse.Namespace, rng: np.random.Generator) -> Dict:
    ind = rng.integers(0, edges // args.degree, edges).astype(np.int64)
    val = rng.permutation(edges).astype(np.int64)
    val32 = val.astype(np.int32)
    pairs = np.empty(2 * edges, np.int64)
    pairs[0::2], pairs[1::2] = ind, val
    n = (args.draws // args.fanout) * args.fanout
    out, got, got32 = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int32)
    layouts: Dict[str, Callable[[np.ndarray], None]] = {
        "nbrs": lambda p: _nbrs(ind, p, out),
        "sep64": lambda p: _separate(ind, val, p, out, got),
        "sep32": lambda p: _separate(ind, val32, p, out, got32),
        "pairs": lambda p: _pairs(pairs, p, out, got),
    }
    times: Dict[str, List[float]] = {name: [] for name in layouts}
    for name, fn in layouts.items():  # compile
        fn(draw(rng, edges, args.draws, args.fanout, args.degree))
    for _ in range(args.repeats):  # interleaved: load drifts hit every layout alike
        pos = draw(rng, edges, args.draws, args.fanout, args.degree)
        for name, fn in layouts.items():
            start = time.perf_counter()
            fn(pos)
            times[name].append(time.perf_counter() - start)
    ms = {name: round(1e3 * float(np.median(t)), 3) for name, t in times.items()}
    extra = {name: round(ms[name] - ms["nbrs"], 3) for name in ("sep64", "sep32", "pairs")}
    return {"edges": edges, "ms": ms, "extra_ms_over_nbrs": extra}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--edges", type=int, nargs="+", default=[2_000_000, 20_000_000])
    p.add_argument("--draws", type=int, default=400_000, help="positions per measurement")
    p.add_argument("--fanout", type=int, default=10)
    p.add_argument("--degree", type=int, default=20)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    results = [measure(edges, args, rng) for edges in args.edges]
    print(json.dumps({"benchmark": "edge_id_layout", "draws": args.draws,
                      "fanout": args.fanout, "degree": args.degree,
                      "repeats": args.repeats, "results": results}))


if __name__ == "__main__":
    main()
