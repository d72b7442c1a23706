"""LABOR's numba kernels (``nogil``, cached): every jitted function of LABOR lives here.

numba's on-disk cache of a kernel is invalidated when the file defining it changes,
not when a file defining a kernel it calls does; with every LABOR kernel in this one
file, an edit to any of them recompiles them all. (:func:`prefetch`, an intrinsic
of :mod:`pyg_dist.sampler._sample_kernels`, is the one piece from elsewhere.)

A seed's in-edges are ranked by the float variate ``r = (x + 0.5) * 2^-53`` of a
53-bit hash ``x`` of the source's key (:func:`hash_bits`; ``r / w`` with weights).
For unweighted fan-outs up to :data:`FAST_MAX` the same order, with the same ties,
comes from the integer ``rank = x + (x & 1)`` for ``x >= 2^52``, else ``x``
(:func:`rank_of`): below ``2^52`` the float is exact and increasing; above,
``x + 0.5`` rounds half to even, so ``2m - 1`` and ``2m`` meet at ``2m``. An integer
rank shifted left by ``bits(degree)`` and or-ed with the edge's offset in its row is a
single distinct ``int64`` per candidate (it fits: candidates of a filtered row have
``rank < 2^53 * limit / degree``; a row ranked whole has at most :data:`ALL_MAX`
edges), so the ``k`` first are found with no branch on the data
(:func:`pick_by_rank`):

1. hash the whole row into a buffer (a loop the compiler vectorises);
2. keep those below ``2^53 * 2k / degree`` (about ``2k``; ``4k`` if fewer than ``k``
   passed; every edge of a row of at most ``2k``), written branch-free;
3. sort the few kept by counting, for each, how many rank before it;
4. where two of the first ``k + 1`` share a rank (repeated edges: the same source),
   order those by the source's key, then the edge id, as the reference does.

Other rows are ranked in floats (a sorted buffer of ``k``, or a heap above
``_INSERT_MAX``). Edge ids (``ties``) travel as ``(int32 words, wide)``: an int64
table as two words per id, so int32 and int64 id tables share one compiled kernel.
"""
from __future__ import annotations

import sys

import numba
import numpy as np

from pyg_dist.sampler._sample_kernels import PREFETCH_AHEAD, prefetch

__all__ = ["FAST_MAX", "ALL_MAX", "hash_bits", "rank_of", "rank_of_bits", "pick_by_rank",
           "labor_fill", "gather_drawn"]

#: fan-outs up to this are picked in integers (above, in floats)
FAST_MAX = 32
#: rows of at most this many edges may be ranked whole (O(degree^2) counting)
ALL_MAX = 512
_JIT = dict(cache=True, nogil=True)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_TWO53 = 9007199254740992.0
_SCALE = 1.0 / _TWO53  # 2^-53
_INSERT_MAX = 32  # up to this fan-out, insertion into a sorted buffer beats a heap
_LOW = 0 if sys.byteorder == "little" else 1  # the low word of an int64 viewed as int32


@numba.njit(inline="always", **_JIT)
def hash_bits(seed: np.uint64, key: np.uint64) -> int:
    """The 53-bit hash ``x`` of ``key`` under ``seed`` (SplitMix64's output function of
    ``seed + (key + 1) * golden``, its top 53 bits): LABOR's ``r`` is ``(x + 0.5) * 2^-53``."""
    z = seed + (key + np.uint64(1)) * _GOLD
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.int64((z ^ (z >> np.uint64(31))) >> np.uint64(11))


@numba.njit(inline="always", **_JIT)
def rank_of(seed: np.uint64, key: np.uint64) -> int:
    """An integer ordered (and tied) exactly as the variate ``r`` of ``key`` under
    ``seed`` (:func:`pyg_dist.sampler._labor.variates`)."""
    return rank_of_bits(hash_bits(seed, key))


@numba.njit(inline="always", **_JIT)
def rank_of_bits(x: int) -> int:
    """The rank of the 53-bit hash ``x``: ordered and tied as ``(x + 0.5) * 2^-53``
    rounded to a double."""
    return x + ((x & 1) & (x >> 52))


@numba.njit(inline="always", **_JIT)
def _variate(seed: np.uint64, key: np.uint64) -> float:
    return (float(hash_bits(seed, key)) + 0.5) * _SCALE  # float() exact: < 2^53


@numba.njit(inline="always", **_JIT)
def _tie(ties, e: int) -> int:
    """Edge ``e``'s id in ``ties = (words, wide)``: int32 words, two per id if ``wide``."""
    words, wide = ties
    if wide:
        lo = np.int64(words[2 * e + _LOW]) & np.int64(0xFFFFFFFF)
        return (np.int64(words[2 * e + 1 - _LOW]) << 32) | lo
    return np.int64(words[e])


@numba.njit(inline="always", **_JIT)
def _ahead(va, ea, vb, eb, keys, ties) -> bool:
    """Whether value ``va`` of edge ``ea`` ranks before value ``vb`` of edge ``eb``: a
    smaller value, then a smaller source key, then a smaller edge id."""
    if va != vb:
        return va < vb
    if keys[ea] != keys[eb]:
        return keys[ea] < keys[eb]
    return _tie(ties, ea) < _tie(ties, eb)


@numba.njit(**_JIT)
def _sift(vals, keys, ties, heap, cand, i, n) -> None:
    """Restores the max-heap ``heap[:n]`` (of local indices, edges ``cand``) below ``i``."""
    while True:
        top, left, right = i, 2 * i + 1, 2 * i + 2
        if left < n and _ahead(vals[heap[top]], cand[heap[top]], vals[heap[left]],
                               cand[heap[left]], keys, ties):
            top = left
        if right < n and _ahead(vals[heap[top]], cand[heap[top]], vals[heap[right]],
                                cand[heap[right]], keys, ties):
            top = right
        if top == i:
            return
        heap[i], heap[top] = heap[top], heap[i]
        i = top


@numba.njit(**_JIT)
def _smallest(vals, keys, ties, cand, m, k, heap, out, at) -> None:
    """Writes the edges of the ``k`` first-ranked of ``cand[:m]`` to ``out[at:at+k]``,
    in rank order: a bounded max-heap, O(m log k)."""
    if k == 0:
        return
    root = np.int64(0)  # not the literal 0: one compiled _sift, not two
    for j in range(k):
        heap[j] = j
    for j in range(k // 2 - 1, -1, -1):
        _sift(vals, keys, ties, heap, cand, j, k)
    for j in range(k, m):
        if _ahead(vals[j], cand[j], vals[heap[0]], cand[heap[0]], keys, ties):
            heap[0] = j
            _sift(vals, keys, ties, heap, cand, root, k)
    for n in range(k, 0, -1):  # the last-ranked first, written from the back
        out[at + n - 1] = cand[heap[0]]
        heap[0] = heap[n - 1]
        _sift(vals, keys, ties, heap, cand, root, n - 1)


@numba.njit(**_JIT)
def _candidates(keys, weights, seed, a, b, k, use_weight, vals, cand) -> int:
    """The eligible in-edges ``a..b`` of one seed into ``cand`` and their ``r`` (``r / w``)
    into ``vals``; returns how many. An unweighted row of more than ``2k`` edges keeps
    only those with ``r < 2k / degree`` (``r`` is uniform: about ``2k`` of them), which
    hold its ``k`` first-ranked whenever there are at least ``k``; otherwise (rarely)
    every edge is kept."""
    m = 0
    if use_weight:
        for e in range(a, b):
            if weights[e] > 0.0:
                vals[m], cand[m] = _variate(seed, np.uint64(keys[e])) / weights[e], e
                m += 1
        return m
    if 2 * k < b - a:
        tau = 2.0 * k / (b - a)
        for e in range(a, b):  # branch-free: every edge written, kept if below tau
            r = _variate(seed, np.uint64(keys[e]))
            vals[m], cand[m] = r, e
            m += r < tau
        if m >= k:
            return m
        m = 0
    for e in range(a, b):
        vals[m], cand[m] = _variate(seed, np.uint64(keys[e])), e
        m += 1
    return m


@numba.njit(**_JIT)
def _first_k(vals, cand, m, k, keys, ties, bv, out, at) -> None:
    """Writes the edges of the ``k`` first-ranked of ``cand[:m]`` (``k <= m``) to
    ``out[at:at+k]`` in rank order (their values in ``bv``): the first ``k`` sorted by
    insertion, then only a candidate ranking before the current ``k``-th is inserted."""
    if k == 0:
        return
    for j in range(m):
        v, e = vals[j], cand[j]
        if j < k:
            q = j
        elif v > bv[k - 1] or (v == bv[k - 1] and
                               not _ahead(v, e, bv[k - 1], out[at + k - 1], keys, ties)):
            continue
        else:
            q = k - 1
        while q > 0 and _ahead(v, e, bv[q - 1], out[at + q - 1], keys, ties):
            bv[q], out[at + q] = bv[q - 1], out[at + q - 1]
            q -= 1
        bv[q], out[at + q] = v, e


@numba.njit(inline="always", **_JIT)
def _bits(d: int) -> int:
    """Bits that hold every offset below ``d`` (at least 1)."""
    s = 1
    while (1 << s) < d:
        s += 1
    return s


@numba.njit(inline="always", **_JIT)
def _kept(keys, seed, a, d, k, s, buf, vals) -> int:
    """The packed ``rank << s | offset`` of the candidates of row ``a..a+d`` into
    ``vals``; returns how many (at least ``k``), or ``-1`` if the row does not fit."""
    for j in range(d):
        buf[j] = rank_of(seed, np.uint64(keys[a + j]))
    limit = 2 * k
    for _ in range(2):  # 2k, then 4k expected candidates
        if limit >= d:
            break
        t = np.int64(limit / d * _TWO53)
        m = 0
        for j in range(d):
            v = buf[j]
            vals[m] = (min(v, t) << s) | j  # written always, kept below t
            m += v < t
        if m >= k:
            return m
        limit *= 2
    if d > ALL_MAX:
        return -1
    for j in range(d):
        vals[j] = (buf[j] << s) | j
    return d


@numba.njit(inline="always", **_JIT)
def _count_sort(vals, m, out) -> None:
    """``vals[:m]`` (distinct) ascending into ``out[:m]``: each goes where as many
    rank before it."""
    for i in range(m):
        v = vals[i]
        r = 0
        for j in range(m):
            r += vals[j] < v
        out[r] = v


@numba.njit(**_JIT)
def _order_ties(slot, m, s, a, keys, ties) -> None:
    """Reorders runs of equal rank in ``slot[:m]`` by source key, then edge id
    (insertion: stable, and cheap on the sorted input)."""
    mask = (1 << s) - 1
    for i in range(1, m):
        v = slot[i]
        q = i
        while q > 0:
            u = slot[q - 1]
            if (u >> s) != (v >> s):
                break  # sorted by rank already
            eu, ev = a + (u & mask), a + (v & mask)
            if keys[eu] < keys[ev] or (keys[eu] == keys[ev] and
                                       _tie(ties, eu) <= _tie(ties, ev)):
                break
            slot[q] = u
            q -= 1
        slot[q] = v


@numba.njit(inline="always", **_JIT)
def pick_by_rank(keys, ties, seed, a, d, k, buf, vals, slot, pos, at) -> bool:
    """Writes the CSC positions of the ``k`` (``1 <= k <= min(d, FAST_MAX)``)
    first-ranked in-edges of row ``a..a+d`` to ``pos[at:at+k]``, in rank order; returns
    ``False`` (nothing written) for a row that does not fit. ``buf``, ``vals`` and
    ``slot`` hold at least ``d`` int64 each; ``ties``: ``(words, wide)``."""
    s = _bits(d)
    m = _kept(keys, seed, a, d, k, s, buf, vals)
    if m < 0:
        return False
    _count_sort(vals, m, slot)
    tie = False
    for j in range(min(k + 1, m) - 1):
        tie |= (slot[j] >> s) == (slot[j + 1] >> s)
    if tie:
        _order_ties(slot, m, s, a, keys, ties)
    mask = (1 << s) - 1
    for j in range(k):
        pos[at + j] = a + (slot[j] & mask)
    return True


@numba.njit(**_JIT)
def _bounds(indptr, weights, seeds, fanout, use_weight):
    """Start, end and number of draws of every seed row (one pass over ``indptr``)."""
    n = seeds.shape[0]
    start, end = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    counts = np.empty(n, dtype=np.int64)
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch(indptr, seeds[i + PREFETCH_AHEAD])
        a, b = indptr[seeds[i]], indptr[seeds[i] + 1]
        start[i], end[i], m = a, b, b - a
        if use_weight:
            m = 0
            for e in range(a, b):
                m += 1 if weights[e] > 0.0 else 0
        counts[i] = m if fanout < 0 or m <= fanout else fanout
    return start, end, counts


@numba.njit(**_JIT)
def _pick_floats(keys, ties, weights, seed, a, b, k, use_weight, cand, fvals, bv, heap, pos,
                 at) -> None:
    """Writes the CSC positions of row ``a..b``'s ``k`` first-ranked edges to
    ``pos[at:at+k]``, ranked in floats (weighted rows, large fan-outs, rows too wide
    for :func:`pick_by_rank`)."""
    m = _candidates(keys, weights, seed, a, b, k, use_weight, fvals, cand)
    if k <= _INSERT_MAX:  # small k: a sorted buffer of k, written in place
        _first_k(fvals, cand, m, k, keys, ties, bv, pos, at)
    else:
        _smallest(fvals, keys, ties, cand, m, k, heap, pos, at)


@numba.njit(**_JIT)
def labor_fill(indptr, keys, ties, weights, seeds, fanout, seed, use_weight):
    """Per seed, the CSC positions of the ``min(fanout, eligible)`` in-edges of smallest
    ``r / w`` (``weights``: float64, read only with ``use_weight``; ``ties``:
    ``(words, wide)``); returns ``(counts, pos)``. Every line of a row's keys is
    prefetched ``PREFETCH_AHEAD`` seeds ahead."""
    start, end, counts = _bounds(indptr, weights, seeds, fanout, use_weight)
    n, widest = seeds.shape[0], 1
    for i in range(n):
        widest = max(widest, end[i] - start[i])
    pos = np.empty(counts.sum(), dtype=np.int64)
    buf, vals = np.empty(widest, dtype=np.int64), np.empty(widest, dtype=np.int64)
    slot, cand = np.empty(widest, dtype=np.int64), np.empty(widest, dtype=np.int64)
    fvals, bv = np.empty(widest, dtype=np.float64), np.empty(_INSERT_MAX, dtype=np.float64)
    line = max(64 // keys.itemsize, 1)
    at = np.int64(0)  # not the literal 0: one compiled _pick_floats (and callees)
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            a, b = start[i + PREFETCH_AHEAD], end[i + PREFETCH_AHEAD]
            for e in range(a, b, line):
                prefetch(keys, e)
            if b > a:  # the last line, when the row does not start on one
                prefetch(keys, b - 1)
        a, b, k = start[i], end[i], counts[i]
        if k > 0 and (use_weight or k > FAST_MAX or  # inlined: the common rows' path
                      not pick_by_rank(keys, ties, seed, a, b - a, k, buf, vals, slot, pos,
                                       at)):
            _pick_floats(keys, ties, weights, seed, a, b, k, use_weight, cand, fvals, bv,
                         buf, pos, at)
        at += k
    return counts, pos


@numba.njit(**_JIT)
def gather_drawn(indices, ties, pos, values, out):
    """The drawn edges' sources and (``values``) their ids in ``ties`` (``(words,
    wide)``), prefetched ahead; the ids go to the front of ``out`` when it is long
    enough (the caller's buffer: no copy later), else to a new array."""
    total = pos.shape[0]
    words, wide = ties
    step = 2 if wide else 1
    nbrs = np.empty(total, dtype=np.int64)
    if values and out.shape[0] >= total:
        got = out[:total]
    else:
        got = np.empty(total if values else 0, dtype=np.int64)
    for j in range(total):
        if j + PREFETCH_AHEAD < total:
            prefetch(indices, pos[j + PREFETCH_AHEAD])
            if values:
                prefetch(words, step * pos[j + PREFETCH_AHEAD])
        nbrs[j] = indices[pos[j]]
        if values:
            got[j] = _tie(ties, pos[j])
    return nbrs, got
