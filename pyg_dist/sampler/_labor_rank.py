"""LABOR's picks for small fan-outs, in integers (numba, ``nogil``).

:mod:`pyg_dist.sampler._labor` ranks a seed's in-edges by the float variate
``r = (x + 0.5) * 2^-53`` of a 53-bit hash ``x`` of the source's key. The same order,
with the same ties, comes from the integer ``rank = x + (x & 1)`` for ``x >= 2^52``,
else ``x`` (:func:`rank_of`): below ``2^52`` the float is exact and increasing; above,
``x + 0.5`` rounds half to even, so ``2m - 1`` and ``2m`` meet at ``2m``. An integer
rank shifted left by ``bits(degree)`` and or-ed with the edge's offset in its row is a
single distinct ``int64`` per candidate (it fits: candidates of a filtered row have
``rank < 2^53 * limit / degree``; a row ranked whole has at most :data:`ALL_MAX`
edges), so the ``k`` first are found with no branch on the data:

1. hash the whole row into a buffer (a loop the compiler vectorises);
2. keep those below ``2^53 * 2k / degree`` (about ``2k``; ``4k`` if fewer than ``k``
   passed; every edge of a row of at most ``2k``), written branch-free;
3. sort the few kept by counting, for each, how many rank before it;
4. where two of the first ``k + 1`` share a rank (repeated edges: the same source),
   order those by the source's key, then the edge id, as the reference does.

:func:`pick_by_rank` returns ``False`` when a row does not fit (the caller then ranks
it in floats).
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["FAST_MAX", "ALL_MAX", "hash_bits", "rank_of", "rank_of_bits", "pick_by_rank"]

#: fan-outs up to this are picked here (above, a heap in floats)
FAST_MAX = 32
#: rows of at most this many edges may be ranked whole (O(degree^2) counting)
ALL_MAX = 512
_JIT = dict(cache=True, nogil=True)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_TWO53 = 9007199254740992.0


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
def _bits(d: int) -> int:
    """Bits that hold every offset below ``d`` (at least 1)."""
    s = 1
    while (1 << s) < d:
        s += 1
    return s


@numba.njit(**_JIT)
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


@numba.njit(**_JIT)
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
            if keys[eu] < keys[ev] or (keys[eu] == keys[ev] and ties[eu] <= ties[ev]):
                break
            slot[q] = u
            q -= 1
        slot[q] = v


@numba.njit(**_JIT)
def pick_by_rank(keys, ties, seed, a, d, k, buf, vals, slot, pos, at) -> bool:
    """Writes the CSC positions of the ``k`` (``1 <= k <= min(d, FAST_MAX)``)
    first-ranked in-edges of row ``a..a+d`` to ``pos[at:at+k]``, in rank order; returns
    ``False`` (nothing written) for a row that does not fit. ``buf``, ``vals`` and
    ``slot`` hold at least ``d`` int64 each."""
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
