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
  among them, ``last`` keeps the ``min(fanout, eligible)`` most recent ones and, with
  replacement, draws ``fanout`` times among those (pyg-lib's semantics); when all
  eligible edges are taken, they come in time order (ties in edge order), as PyG sorts
  each node's neighbours by time before sampling. Top-k
  selections (weighted, ``last``) keep a heap of k: O(degree log k), not a sort.

Inputs are checked before any kernel runs (:mod:`pyg_dist.sampler._checks`): a kernel
never reads or writes outside its arrays, whatever the CSC or the seeds hold.

Random numbers come from a SplitMix64 stream seeded per call, so results are
reproducible for a given ``rng_seed`` whatever thread runs the kernel.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from torch import Tensor

from pyg_dist.sampler._addresses import emit_prefetch
from pyg_dist.sampler._checks import (check_csc, check_edge_values, check_sample_args,
                                     check_values_out)

_JIT = dict(cache=True, nogil=True)
_FLOYD_MAX = 64  # above this fan-out, partial Fisher-Yates (O(degree)) beats O(k^2) Floyd


PREFETCH_AHEAD = 16  # loop iterations between a prefetch and the access it serves


@intrinsic
def prefetch(typingctx, arr, idx):
    """``prefetch(arr, i)``: asks the CPU to start loading ``arr[i]`` into cache.

    Random-access loops (hash probes, row gathers) issue it ``PREFETCH_AHEAD``
    iterations ahead, so many cache misses are in flight at once instead of one.
    """
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]],
                                       wraparound=False)
        emit_prefetch(builder, builder.bitcast(ptr, ir.IntType(8).as_pointer()))
        return context.get_dummy_value()
    return sig, codegen


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(**_JIT)
def _mix(z: np.uint64) -> np.uint64:
    """SplitMix64's output function: 64 random bits from the stream position ``z``.

    The stream state is a plain ``uint64`` local that callers advance by ``_GOLDEN``
    and thread through (kept in a register, unlike a state array).
    """
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(**_JIT)
def _unit(bits: np.uint64) -> float:
    """A float in [0, 1) from 64 random bits."""
    return float(bits >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(**_JIT)
def _below(bits: np.uint64, n: int) -> int:
    """An int in [0, n) from 64 random bits."""
    return min(int(_unit(bits) * n), n - 1)


@numba.njit(**_JIT)
def _floyd(st: np.uint64, deg: int, k: int, out: np.ndarray, at: int,
           base: int) -> np.uint64:
    """Writes ``base +`` ``k`` distinct offsets from ``range(deg)`` to ``out[at:at+k]``;
    returns the advanced stream state."""
    for j in range(deg - k, deg):
        st += _GOLDEN
        t = base + _below(_mix(st), j + 1)
        q0 = at + j - (deg - k)
        for q in range(at, q0):
            if out[q] == t:
                t = base + j
                break
        out[q0] = t
    return st


@numba.njit(**_JIT)
def _fisher_yates(st: np.uint64, deg: int, k: int, scratch: np.ndarray, out: np.ndarray,
                  at: int, base: int) -> np.uint64:
    """Partial Fisher-Yates shuffle: like :func:`_floyd`, O(degree)."""
    for i in range(deg):
        scratch[i] = i
    for i in range(k):
        st += _GOLDEN
        j = i + _below(_mix(st), deg - i)
        scratch[i], scratch[j] = scratch[j], scratch[i]
        out[at + i] = base + scratch[i]
    return st


@numba.njit(**_JIT)
def _rows_of(indptr, seeds, fanout, replace):
    """Start, degree and number of draws of every seed row (one pass over ``indptr``)."""
    n = seeds.shape[0]
    start = np.empty(n, dtype=np.int64)
    deg = np.empty(n, dtype=np.int64)
    counts = np.empty(n, dtype=np.int64)
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch(indptr, seeds[i + PREFETCH_AHEAD])
        a = indptr[seeds[i]]
        d = indptr[seeds[i] + 1] - a
        start[i], deg[i] = a, d
        if fanout < 0 or (not replace and d <= fanout):
            counts[i] = d
        else:
            counts[i] = fanout if d > 0 else 0
    return start, deg, counts


@numba.njit(**_JIT)
def _uniform_sample(indptr, indices, seeds, fanout, replace, seed, values, out, offset):
    """Uniform sampling as three tight passes (rows, positions, neighbours): within a
    pass the memory accesses are independent, so their cache misses overlap. A
    non-empty ``values`` (one per stored edge) is read at the drawn positions in the
    neighbours' pass (returned last; empty otherwise), into the front of ``out`` when it
    is long enough (the caller's buffer: no copy later), else into a new array. The
    positions come back plus ``offset`` (the edges' global ids: no pass of its own)."""
    start, deg, counts = _rows_of(indptr, seeds, fanout, replace)
    total = 0
    for i in range(counts.shape[0]):
        total += counts[i]
    pos = np.empty(total, dtype=np.int64)
    st = np.uint64(seed)
    scratch = np.empty(0, dtype=np.int64)
    at = 0
    for i in range(seeds.shape[0]):
        a, d, k = start[i], deg[i], counts[i]
        if k == d and not (replace and fanout >= 0):
            for j in range(k):
                pos[at + j] = a + j
        elif replace:
            for j in range(k):
                st += _GOLDEN
                pos[at + j] = a + _below(_mix(st), d)
        elif k <= _FLOYD_MAX:
            st = _floyd(st, d, k, pos, at, a)
        else:
            if scratch.shape[0] < d:
                scratch = np.empty(d, dtype=np.int64)
            st = _fisher_yates(st, d, k, scratch, pos, at, a)
        at += k
    nbrs = np.empty(total, dtype=indices.dtype)
    gather = values.shape[0] > 0
    if gather and out.shape[0] >= total:
        got = out[:total]
    else:
        got = np.empty(total if gather else 0, dtype=np.int64)  # int32 values are widened
    for j in range(total):
        if j + PREFETCH_AHEAD < total:
            prefetch(indices, pos[j + PREFETCH_AHEAD])
            if gather:
                prefetch(values, pos[j + PREFETCH_AHEAD])
        p = pos[j]
        nbrs[j] = indices[p]
        if gather:
            got[j] = values[p]
        pos[j] = p + offset
    return counts, nbrs, pos, got


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
    st = np.uint64(seed)
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
        chosen, st = _choose(st, buf[:m], fanout, replace, times, weights, use_weight, last)
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
def _above(keys, a, b) -> bool:
    """Whether position ``a`` ranks above ``b``: a larger key, or the same key later."""
    return keys[a] > keys[b] or (keys[a] == keys[b] and a > b)


@numba.njit(**_JIT)
def _sift_down(keys, heap, i, n) -> None:
    """Restores the min-heap (by :func:`_above`) ``heap[:n]`` below slot ``i``."""
    while True:
        low, left, right = i, 2 * i + 1, 2 * i + 2
        if left < n and _above(keys, heap[low], heap[left]):
            low = left
        if right < n and _above(keys, heap[low], heap[right]):
            low = right
        if low == i:
            return
        heap[i], heap[low] = heap[low], heap[i]
        i = low


@numba.njit(**_JIT)
def _top_k(keys, k):
    """Positions of the ``k`` highest-ranked ``keys`` (ties: later positions rank
    higher), lowest first: O(len(keys) log k), a bounded heap instead of a full sort."""
    heap = np.arange(k)
    for i in range(k // 2 - 1, -1, -1):
        _sift_down(keys, heap, i, k)
    for j in range(k, keys.shape[0]):
        if k > 0 and _above(keys, j, heap[0]):
            heap[0] = j
            _sift_down(keys, heap, 0, k)
    out = np.empty(k, dtype=np.int64)
    for n in range(k, 0, -1):  # pop the lowest-ranked first
        out[k - n] = heap[0]
        heap[0] = heap[n - 1]
        _sift_down(keys, heap, 0, n - 1)
    return out


@numba.njit(**_JIT)
def _choose(st, cand, fanout, replace, times, weights, use_weight, last):
    """Draws among the eligible positions ``cand``; returns them and the stream state."""
    m = cand.shape[0]
    if m == 0:
        return np.empty(0, dtype=np.int64), st
    if fanout < 0 or (not replace and m <= fanout):
        if times.shape[0] > 0:  # temporal: by time, as PyG sorts each node's neighbours
            return cand[np.argsort(times[cand], kind="mergesort")], st
        return cand.copy(), st
    k = fanout
    if last:  # pyg-lib: the min(k, m) most recent; with replacement, k draws among them
        cand = cand[_top_k(times[cand], min(k, m))]
        m = cand.shape[0]
        if not replace:
            return cand, st
    out = np.empty(k, dtype=np.int64)
    if use_weight and replace:
        cdf = np.cumsum(weights[cand])
        for j in range(k):
            st += _GOLDEN
            at = np.searchsorted(cdf, _unit(_mix(st)) * cdf[-1], side="right")
            out[j] = cand[min(at, m - 1)]
    elif use_weight:  # Efraimidis-Spirakis: top-k of u^(1/w), as log(u)/w
        keys = np.empty(m, dtype=np.float64)
        for j in range(m):
            st += _GOLDEN
            keys[j] = np.log(max(_unit(_mix(st)), 1e-300)) / weights[cand[j]]
        out[:] = cand[_top_k(keys, k)]
    elif replace:
        for j in range(k):
            st += _GOLDEN
            out[j] = cand[_below(_mix(st), m)]
    else:
        st = _floyd(st, m, k, out, 0, 0)
        for j in range(k):
            out[j] = cand[out[j]]
    return out, st


_NP_INT = {torch.int64: np.int64, torch.int32: np.int32}
_NO_VALUES = np.empty(0, dtype=np.int64)


def _np(t: Tensor, dtype: type) -> np.ndarray:
    return t.detach().contiguous().numpy().astype(dtype, copy=False)


class SampledHop(NamedTuple):
    """Neighbours drawn per seed, their global ids, the drawn edges' CSC positions plus
    the call's ``edge_offset`` (grouped by seed, in seed order) and ``edge_values`` there
    (``None``: not asked)."""
    counts: Tensor
    nbrs: Tensor
    pos: Tensor
    values: Optional[Tensor] = None


def sample_one_hop(indptr: Tensor, indices: Tensor, seeds: Tensor, fanout: int,
                   replace: bool, rng_seed: int, weights: Optional[Tensor] = None,
                   edge_time: Optional[Tensor] = None, seed_time: Optional[Tensor] = None,
                   temporal_strategy: str = "uniform",
                   edge_values: Optional[Tensor] = None,
                   values_out: Optional[Tensor] = None, edge_offset: int = 0) -> SampledHop:
    """Samples in-neighbours of local destination rows ``seeds``.

    Args:
        indptr (Tensor): CSC row pointer over local destination rows (int64; checked
            once per tensor, and again only after it is modified in place).
        indices (Tensor): global source id of every stored edge (int64 or int32).
        seeds (Tensor): local rows to sample for (repeats allowed: disjoint mode).
        fanout (int): neighbours per seed; ``-1`` takes all.
        replace (bool): draw with replacement.
        rng_seed (int): seed of the random stream.
        weights (Tensor, optional): per-edge sampling weight (``0`` = never).
        edge_time (Tensor, optional): per-edge time; needs ``seed_time``.
        seed_time (Tensor, optional): time of every seed; edges newer are skipped.
        temporal_strategy (str): ``"uniform"`` or ``"last"``.
        edge_values (Tensor, optional): one int64 or int32 per stored edge (e.g.
            original ids), read at the drawn positions in the neighbours' pass (misses
            overlap) and returned as int64.
        values_out (Tensor, optional): a contiguous 1-D int64 buffer: when uniform
            sampling draws at most its length, ``values`` is its front (a view: the
            caller's concatenation then copies nothing); otherwise it is ignored.
        edge_offset (int): added to the drawn positions (``pos``): the partition's first
            global edge id gives the edges' global ids.

    Returns:
        :class:`SampledHop`.
    """
    check_csc(indptr, indices)
    check_sample_args(indptr.numel() - 1, indices.numel(), seeds, fanout, weights, edge_time,
                      seed_time, temporal_strategy)
    check_edge_values(edge_values, indices.numel())
    ip, sd = _np(indptr, np.int64), _np(seeds, np.int64)
    seed = np.uint64(int(rng_seed) & 0xFFFFFFFFFFFFFFFF)  # one kernel signature for any seed
    if weights is None and edge_time is None:
        idx = _np(indices, _NP_INT[indices.dtype])
        values = _np(edge_values, _NP_INT[edge_values.dtype]) \
            if edge_values is not None and indices.numel() else _NO_VALUES
        out = _NO_VALUES
        if values_out is not None and values.size:
            check_values_out(values_out)
            out = values_out.numpy()
        counts, nbrs, pos, got = _uniform_sample(ip, idx, sd, int(fanout), bool(replace), seed,
                                                 values, out, int(edge_offset))
        return SampledHop(torch.from_numpy(counts), torch.from_numpy(nbrs), torch.from_numpy(pos),
                          torch.from_numpy(got) if edge_values is not None else None)
    use_time, use_weight = edge_time is not None, weights is not None
    times = _np(edge_time.reshape(-1), np.int64) if use_time else np.empty(0, np.int64)
    st = _np(seed_time.reshape(-1), np.int64) if use_time else np.empty(0, np.int64)
    w = _np(weights.reshape(-1), np.float64) if use_weight else np.empty(0, np.float64)
    counts, pos = _filtered_fill(ip, sd, int(fanout), bool(replace), seed, times, st, w,
                                 use_time, use_weight, use_time and temporal_strategy == "last")
    pos_t = torch.from_numpy(pos)
    return SampledHop(torch.from_numpy(counts), indices[pos_t], pos_t + int(edge_offset),
                      edge_values[pos_t].long() if edge_values is not None else None)
