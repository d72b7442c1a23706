"""Local one-hop neighbour sampling kernels (numba, ``nogil``, compiled once and cached).

Every kernel reads a CSC partition (``indptr`` over local destination rows,
``indices`` holding global source ids) and returns, per seed row, how many
neighbours were drawn, their global ids and their CSC positions (the caller adds
the partition's edge offset to get global edge ids).

Strategies:

- uniform without replacement: Robert Floyd's algorithm, so a hub costs
  O(fanout), not O(degree) (a partial Fisher-Yates shuffle when the fan-out is large);
- uniform with replacement;
- weighted by an edge attribute (Efraimidis-Spirakis keys without replacement,
  inverse CDF with replacement); zero-weight edges are never drawn;
- temporal: only edges whose time is not after the seed's time; ``uniform`` draws
  among them, ``last`` takes the most recent ones.

Random numbers come from a SplitMix64 stream seeded per call, so results are
reproducible for a given ``rng_seed`` whatever thread runs the kernel.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numba
import numpy as np
import torch
from torch import Tensor

_JIT = dict(cache=True, nogil=True)
_FLOYD_MAX = 64  # above this fan-out, partial Fisher-Yates (O(degree)) beats O(k^2) Floyd


@numba.njit(**_JIT)
def _next(state: np.ndarray) -> np.uint64:
    """SplitMix64: advances ``state[0]`` and returns 64 random bits."""
    state[0] += np.uint64(0x9E3779B97F4A7C15)
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(**_JIT)
def _uniform(state: np.ndarray) -> float:
    """A float in [0, 1)."""
    return float(_next(state) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(**_JIT)
def _below(state: np.ndarray, n: int) -> int:
    """An int in [0, n)."""
    return min(int(_uniform(state) * n), n - 1)


@numba.njit(**_JIT)
def _floyd(state: np.ndarray, deg: int, k: int, out: np.ndarray, at: int) -> None:
    """Writes ``k`` distinct offsets from ``range(deg)`` to ``out[at:at+k]``."""
    for j in range(deg - k, deg):
        t = _below(state, j + 1)
        for q in range(at, at + j - (deg - k)):
            if out[q] == t:
                t = j
                break
        out[at + j - (deg - k)] = t


@numba.njit(**_JIT)
def _fisher_yates(state: np.ndarray, deg: int, k: int, scratch: np.ndarray,
                  out: np.ndarray, at: int) -> None:
    for i in range(deg):
        scratch[i] = i
    for i in range(k):
        j = i + _below(state, deg - i)
        scratch[i], scratch[j] = scratch[j], scratch[i]
        out[at + i] = scratch[i]


@numba.njit(**_JIT)
def _uniform_counts(indptr, seeds, fanout, replace):
    counts = np.empty(seeds.shape[0], dtype=np.int64)
    for i in range(seeds.shape[0]):
        deg = indptr[seeds[i] + 1] - indptr[seeds[i]]
        if fanout < 0 or (not replace and deg <= fanout):
            counts[i] = deg
        else:
            counts[i] = fanout if deg > 0 else 0
    return counts


@numba.njit(**_JIT)
def _uniform_fill(indptr, seeds, fanout, replace, counts, offsets, pos, seed):
    state = np.array([np.uint64(seed)], dtype=np.uint64)
    scratch = np.empty(0, dtype=np.int64)
    for i in range(seeds.shape[0]):
        start, deg = indptr[seeds[i]], indptr[seeds[i] + 1] - indptr[seeds[i]]
        at, k = offsets[i], counts[i]
        if k == deg and not (replace and fanout >= 0):
            for j in range(k):
                pos[at + j] = start + j
            continue
        if replace:
            for j in range(k):
                pos[at + j] = start + _below(state, deg)
            continue
        if k <= _FLOYD_MAX:
            _floyd(state, deg, k, pos, at)
        else:
            if scratch.shape[0] < deg:
                scratch = np.empty(deg, dtype=np.int64)
            _fisher_yates(state, deg, k, scratch, pos, at)
        for j in range(k):
            pos[at + j] += start


@numba.njit(**_JIT)
def _eligible(start, end, times, seed_t, weights, use_time, use_weight, buf):
    """Positions in ``[start, end)`` that may be drawn; returns how many were written."""
    n = 0
    for e in range(start, end):
        if use_time and times[e] > seed_t:
            continue
        if use_weight and not weights[e] > 0.0:
            continue
        buf[n] = e
        n += 1
    return n


@numba.njit(**_JIT)
def _filtered_fill(indptr, seeds, fanout, replace, seed, times, seed_time, weights,
                   use_time, use_weight, last):
    """Temporal and/or weighted sampling (needs an O(degree) scan per seed)."""
    state = np.array([np.uint64(seed)], dtype=np.uint64)
    n = seeds.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    chunks = []
    buf = np.empty(16, dtype=np.int64)
    for i in range(n):
        start, end = indptr[seeds[i]], indptr[seeds[i] + 1]
        if buf.shape[0] < end - start:
            buf = np.empty(end - start, dtype=np.int64)
        seed_t = seed_time[i] if use_time else 0
        m = _eligible(start, end, times, seed_t, weights, use_time, use_weight, buf)
        chosen = _choose(state, buf[:m], fanout, replace, times, weights, use_weight, last)
        counts[i] = chosen.shape[0]
        chunks.append(chosen)
    total = 0
    for c in chunks:
        total += c.shape[0]
    pos = np.empty(total, dtype=np.int64)
    at = 0
    for c in chunks:
        pos[at:at + c.shape[0]] = c
        at += c.shape[0]
    return counts, pos


@numba.njit(**_JIT)
def _choose(state, cand, fanout, replace, times, weights, use_weight, last):
    m = cand.shape[0]
    if m == 0:
        return np.empty(0, dtype=np.int64)
    if fanout < 0 or (not replace and m <= fanout):
        return cand.copy()
    k = fanout
    if last:  # the k most recent eligible edges
        order = np.argsort(times[cand], kind="mergesort")
        return cand[order[m - k:]].copy()
    out = np.empty(k, dtype=np.int64)
    if use_weight and replace:
        cdf = np.cumsum(weights[cand])
        for j in range(k):
            out[j] = cand[min(np.searchsorted(cdf, _uniform(state) * cdf[-1], side="right"), m - 1)]
    elif use_weight:  # Efraimidis-Spirakis: top-k of u^(1/w), as log(u)/w
        keys = np.empty(m, dtype=np.float64)
        for j in range(m):
            keys[j] = np.log(max(_uniform(state), 1e-300)) / weights[cand[j]]
        order = np.argsort(-keys)
        out[:] = cand[order[:k]]
    elif replace:
        for j in range(k):
            out[j] = cand[_below(state, m)]
    else:
        _floyd(state, m, k, out, 0)
        for j in range(k):
            out[j] = cand[out[j]]
    return out


def _np(t: Tensor, dtype: type) -> np.ndarray:
    return t.detach().contiguous().numpy().astype(dtype, copy=False)


def sample_one_hop(indptr: Tensor, indices: Tensor, seeds: Tensor, fanout: int,
                   replace: bool, rng_seed: int, weights: Optional[Tensor] = None,
                   edge_time: Optional[Tensor] = None, seed_time: Optional[Tensor] = None,
                   temporal_strategy: str = "uniform") -> Tuple[Tensor, Tensor, Tensor]:
    """Samples in-neighbours of local destination rows ``seeds``.

    Args:
        indptr (Tensor): CSC row pointer over local destination rows.
        indices (Tensor): global source id of every stored edge.
        seeds (Tensor): local rows to sample for (repeats allowed: disjoint mode).
        fanout (int): neighbours per seed; ``-1`` takes all.
        replace (bool): draw with replacement.
        rng_seed (int): seed of the random stream.
        weights (Tensor, optional): per-edge sampling weight (``0`` = never).
        edge_time (Tensor, optional): per-edge time; needs ``seed_time``.
        seed_time (Tensor, optional): time of every seed; edges newer are skipped.
        temporal_strategy (str): ``"uniform"`` or ``"last"``.

    Returns:
        ``(counts, nbrs, pos)``: neighbours drawn per seed, their global ids, and
        the CSC positions of the drawn edges (grouped by seed, in seed order).
    """
    rows = indptr.numel() - 1
    _check(rows, indices.numel(), seeds, fanout, weights, edge_time, seed_time,
           temporal_strategy)
    ip, sd = _np(indptr, np.int64), _np(seeds, np.int64)
    seed = int(rng_seed) & 0xFFFFFFFFFFFFFFFF
    if weights is None and edge_time is None:
        counts = _uniform_counts(ip, sd, int(fanout), bool(replace))
        offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        pos = np.empty(int(offsets[-1]), dtype=np.int64)
        _uniform_fill(ip, sd, int(fanout), bool(replace), counts, offsets, pos, seed)
    else:
        use_time, use_weight = edge_time is not None, weights is not None
        times = _np(edge_time, np.int64) if use_time else np.empty(0, np.int64)
        st = _np(seed_time, np.int64) if use_time else np.empty(0, np.int64)
        w = _np(weights, np.float64) if use_weight else np.empty(0, np.float64)
        counts, pos = _filtered_fill(ip, sd, int(fanout), bool(replace), seed, times, st, w,
                                     use_time, use_weight,
                                     use_time and temporal_strategy == "last")
    pos_t = torch.from_numpy(pos)
    return torch.from_numpy(counts), indices[pos_t], pos_t


def _check(rows: int, num_edges: int, seeds: Tensor, fanout: int, weights: Optional[Tensor],
           edge_time: Optional[Tensor], seed_time: Optional[Tensor], strategy: str) -> None:
    if seeds.dim() != 1:
        raise ValueError(f"seeds must be a 1-D tensor, got shape {tuple(seeds.shape)}")
    if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= rows):
        raise ValueError(f"seed rows must lie in [0, {rows}), got "
                         f"[{int(seeds.min())}, {int(seeds.max())}]")
    if int(fanout) < -1:
        raise ValueError(f"fanout must be -1 (all) or >= 0, got {fanout}")
    for name, t in (("weights", weights), ("edge_time", edge_time)):
        if t is not None and t.numel() != num_edges:
            raise ValueError(f"{name} has {t.numel()} values for {num_edges} edges")
    if (edge_time is None) != (seed_time is None):
        raise ValueError("temporal sampling needs both edge_time and seed_time")
    if seed_time is not None and seed_time.numel() != seeds.numel():
        raise ValueError(f"seed_time has {seed_time.numel()} values for {seeds.numel()} seeds")
    if strategy not in ("uniform", "last"):
        raise ValueError(f"temporal_strategy must be 'uniform' or 'last', got {strategy!r}")
