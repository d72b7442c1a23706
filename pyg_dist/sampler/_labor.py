"""Layer-neighbour (LABOR) sampling: one hop, on one partition (numba, ``nogil``).

LABOR (Balin and Catalyurek, NeurIPS 2023) gives every candidate vertex ``t`` one
random variate ``r_t`` in ``(0, 1)`` per batch and layer, shared by every seed of the
batch. With *sequential Poisson sampling* (as GraphBolt's ``LayerNeighborSampler``),
each seed ``s`` keeps exactly ``min(k, deg(s))`` in-neighbours: those with the
smallest ``r_t`` (with edge weights ``w``: the smallest ``r_t / w_t``; zero-weight
edges are never drawn). Each seed's draw is uniform (a uniform random ``k``-subset),
but seeds whose neighbourhoods overlap pick the *same* vertices, so a batch holds far
fewer distinct nodes than neighbour sampling with the same fan-out.

``r_t`` is a hash, not a stream: SplitMix64's output function of
``hop seed + (key(t) + 1) * golden``, where ``key(t)`` is ``t``'s **original** id
(the dataset's; identical on every partition and in
:func:`~pyg_dist.sampler._labor_reference.labor_sample`, whatever the partitioning),
and the hop seed mixes the batch's random seed, the layer (unless
``layer_dependency``) and the node type (:func:`type_seed`). Every partition
therefore draws the seeds it owns exactly as one machine would, with no
communication. Ties (the same ``r`` for two edges: a repeated edge) are broken by
the source's original id, then the edge's original id: the picks and their order
(ascending ``r / w``) depend on nothing a partitioning changes.

Partitions store relabelled source ids, so the sampler keeps, per edge type, the
original id of every stored edge's source (:func:`source_keys`; 4 bytes per edge
where ids fit in int32, else 8), built on first use in each sampling process.
"""
from __future__ import annotations

import zlib
from typing import Callable, Optional

import numba
import numpy as np
import torch
from torch import Tensor

from pyg_dist._madvise import empty_large
from pyg_dist.sampler._checks import check_csc, check_sample_args
from pyg_dist.sampler._labor_rank import FAST_MAX, hash_bits, pick_by_rank
from pyg_dist.sampler._sample_kernels import PREFETCH_AHEAD, SampledHop, prefetch

__all__ = ["GOLDEN", "mix64", "batch_seed", "hop_seed", "type_seed",
           "variates", "sample_labor_hop", "source_keys"]

#: SplitMix64's increment (2^64 / golden ratio)
GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
_JIT = dict(cache=True, nogil=True)
_GOLD = np.uint64(GOLDEN)
_SCALE = 1.0 / 9007199254740992.0  # 2^-53
_INSERT_MAX = 32  # up to this fan-out, insertion into a sorted buffer beats a heap


def mix64(z: int) -> int:
    """SplitMix64's output function (a bijection of 64-bit words), on Python ints."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def batch_seed(rng: np.random.Generator) -> int:
    """The batch's random seed, drawn from the batch's generator (the sampler draws it
    first, before anything else of the batch)."""
    return int(rng.integers(0, 2**63))


def hop_seed(seed: int, layer: int, layer_dependency: bool = False) -> int:
    """The seed of layer ``layer`` (0-based) of a batch with random seed ``seed``; every
    layer shares one with ``layer_dependency``."""
    return mix64(int(seed) + GOLDEN * (0 if layer_dependency else int(layer) + 1))


def type_seed(seed: int, node_type: str) -> int:
    """The seed of one node type's variates in a hop with seed ``seed`` (vertices of
    different types with the same id get independent variates)."""
    return mix64(int(seed) ^ zlib.crc32(node_type.encode()))


def variates(keys: np.ndarray, seed: int) -> np.ndarray:
    """``r`` in ``(0, 1)`` (float64) of vertices with original ids ``keys`` under a
    :func:`type_seed` ``seed``: numpy's twin of the kernels' hash (the same bits)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed & _MASK) + (keys.astype(np.uint64) + np.uint64(1)) * _GOLD
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) * _SCALE


@numba.njit(inline="always", **_JIT)
def _variate(seed: np.uint64, key: np.uint64) -> float:
    return (float(hash_bits(seed, key)) + 0.5) * _SCALE  # float() exact: < 2^53


@numba.njit(inline="always", **_JIT)
def _ahead(va, ea, vb, eb, keys, ties) -> bool:
    """Whether value ``va`` of edge ``ea`` ranks before value ``vb`` of edge ``eb``."""
    if va != vb:
        return va < vb
    if keys[ea] != keys[eb]:
        return keys[ea] < keys[eb]
    return ties[ea] < ties[eb]


@numba.njit(**_JIT)
def _before(vals, keys, ties, a, b, ea, eb) -> bool:
    """Whether candidate ``a`` (edge ``ea``) ranks before ``b`` (edge ``eb``): a smaller
    variate, then a smaller source key, then a smaller edge id."""
    if vals[a] != vals[b]:
        return vals[a] < vals[b]
    if keys[ea] != keys[eb]:
        return keys[ea] < keys[eb]
    return ties[ea] < ties[eb]


@numba.njit(**_JIT)
def _sift(vals, keys, ties, heap, cand, i, n) -> None:
    """Restores the max-heap ``heap[:n]`` (of local indices, edges ``cand``) below ``i``."""
    while True:
        top, left, right = i, 2 * i + 1, 2 * i + 2
        if left < n and _before(vals, keys, ties, heap[top], heap[left], cand[heap[top]],
                                cand[heap[left]]):
            top = left
        if right < n and _before(vals, keys, ties, heap[top], heap[right], cand[heap[top]],
                                 cand[heap[right]]):
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
    for j in range(k):
        heap[j] = j
    for j in range(k // 2 - 1, -1, -1):
        _sift(vals, keys, ties, heap, cand, j, k)
    for j in range(k, m):
        if _before(vals, keys, ties, j, heap[0], cand[j], cand[heap[0]]):
            heap[0] = j
            _sift(vals, keys, ties, heap, cand, 0, k)
    for n in range(k, 0, -1):  # the last-ranked first, written from the back
        out[at + n - 1] = cand[heap[0]]
        heap[0] = heap[n - 1]
        _sift(vals, keys, ties, heap, cand, 0, n - 1)


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
def _pick(keys, ties, weights, seed, a, b, k, use_weight, bufs, pos, at) -> None:
    """Writes the CSC positions of row ``a..b``'s ``k`` first-ranked edges to
    ``pos[at:at+k]``: in integers (:func:`~pyg_dist.sampler._labor_rank.pick_by_rank`)
    where the row fits, else in floats."""
    buf, vals, slot, cand, fvals, bv = bufs
    if not use_weight and k <= FAST_MAX and \
            pick_by_rank(keys, ties, seed, a, b - a, k, buf, vals, slot, pos, at):
        return
    m = _candidates(keys, weights, seed, a, b, k, use_weight, fvals, cand)
    if k <= _INSERT_MAX:  # small k: a sorted buffer of k, written in place
        _first_k(fvals, cand, m, k, keys, ties, bv, pos, at)
    else:
        _smallest(fvals, keys, ties, cand, m, k, buf, pos, at)


@numba.njit(**_JIT)
def _gather(indices, ties, pos, values):
    """The drawn edges' sources and (``values``) their ``ties``, prefetched ahead."""
    total = pos.shape[0]
    nbrs = np.empty(total, dtype=np.int64)
    got = np.empty(total if values else 0, dtype=np.int64)
    for j in range(total):
        if j + PREFETCH_AHEAD < total:
            prefetch(indices, pos[j + PREFETCH_AHEAD])
            if values:
                prefetch(ties, pos[j + PREFETCH_AHEAD])
        nbrs[j] = indices[pos[j]]
        if values:
            got[j] = ties[pos[j]]
    return nbrs, got


@numba.njit(**_JIT)
def _labor_fill(indptr, keys, ties, weights, seeds, fanout, seed, use_weight):
    """Per seed, the ``min(fanout, eligible)`` in-edges of smallest ``r / w``; every
    line of a row's keys is prefetched ``PREFETCH_AHEAD`` seeds ahead."""
    start, end, counts = _bounds(indptr, weights, seeds, fanout, use_weight)
    n, widest = seeds.shape[0], 1
    for i in range(n):
        widest = max(widest, end[i] - start[i])
    pos = np.empty(counts.sum(), dtype=np.int64)
    bufs = (np.empty(widest, dtype=np.int64), np.empty(widest, dtype=np.int64),
            np.empty(widest, dtype=np.int64), np.empty(widest, dtype=np.int64),
            np.empty(widest, dtype=np.float64), np.empty(_INSERT_MAX, dtype=np.float64))
    line, at = max(64 // keys.itemsize, 1), 0
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            a, b = start[i + PREFETCH_AHEAD], end[i + PREFETCH_AHEAD]
            for e in range(a, b, line):
                prefetch(keys, e)
            if b > a:  # the last line, when the row does not start on one
                prefetch(keys, b - 1)
        if counts[i] > 0:
            _pick(keys, ties, weights, seed, start[i], end[i], counts[i], use_weight, bufs,
                  pos, at)
        at += counts[i]
    return counts, pos


def sample_labor_hop(indptr: Tensor, indices: Tensor, keys: Tensor, seeds: Tensor,
                     fanout: int, seed: int, weights: Optional[Tensor] = None,
                     edge_ids: Optional[Tensor] = None,
                     edge_values: bool = False) -> SampledHop:
    """LABOR-samples in-neighbours of local destination rows ``seeds``.

    Args:
        indptr (Tensor): CSC row pointer over local destination rows (int64).
        indices (Tensor): global source id of every stored edge.
        keys (Tensor): original id of every stored edge's source (int64 or int32).
        seeds (Tensor): local rows to sample for.
        fanout (int): neighbours per seed; ``-1`` takes all (ordered by variate).
        seed (int): the hop's seed for the sources' node type (:func:`type_seed`).
        weights (Tensor, optional): per-edge float64 weight (``0`` = never).
        edge_ids (Tensor, optional): original id of every stored edge (int64 or int32):
            breaks ties; default: CSC positions.
        edge_values (bool): also return ``edge_ids`` at the drawn edges (int64).

    Returns:
        :class:`~pyg_dist.sampler._sample_kernels.SampledHop`, each seed's edges ascending by
        ``r / w``.
    """
    check_csc(indptr, indices)
    num_edges = indices.numel()
    check_sample_args(indptr.numel() - 1, num_edges, seeds, fanout, weights, None, None,
                      "uniform")
    for name, t in (("keys", keys), ("edge_ids", edge_ids)):
        if t is not None and (t.numel() != num_edges or t.dtype not in (torch.int64,
                                                                        torch.int32)):
            raise ValueError(f"{name} must hold one int64 or int32 per edge ({num_edges}), "
                             f"got {t.dtype} of shape {tuple(t.shape)}")
    ties = edge_ids if edge_ids is not None else torch.arange(num_edges)
    w = weights.reshape(-1).to(torch.float64) if weights is not None else torch.empty(0)
    tie = ties.numpy()
    counts, pos = _labor_fill(indptr.numpy(), keys.numpy(), tie, w.numpy(),
                              seeds.long().contiguous().numpy(), int(fanout),
                              np.uint64(int(seed) & _MASK), weights is not None)
    nbrs, got = _gather(indices.numpy(), tie, pos, bool(edge_values))
    return SampledHop(torch.from_numpy(counts), torch.from_numpy(nbrs), torch.from_numpy(pos),
                      torch.from_numpy(got) if edge_values else None)


def source_keys(to_original: Callable[[Tensor], Tensor], indices: Tensor, num_nodes: int,
                chunk: int = 1 << 22) -> Tensor:
    """The original id of every stored edge's source (what :func:`sample_labor_hop`
    hashes), translated ``chunk`` edges at a time (bounded temporaries).

    Args:
        to_original: relabelled -> original ids of the sources' node type (any owner).
        indices (Tensor): the stored edges' relabelled source ids.
        num_nodes (int): nodes of the sources' type (int32 keys when they fit).
    """
    dtype = torch.int32 if num_nodes < 2**31 else torch.int64
    out = empty_large((indices.numel(),), dtype)  # read at random: huge pages help
    for lo in range(0, indices.numel(), chunk):
        out[lo:lo + chunk] = to_original(indices[lo:lo + chunk].long()).to(dtype)
    return out
