"""Size-constrained label propagation: shrinks a graph before METIS sees it.

METIS's working memory grows with the edges of the graph it gets (with 64-bit
indices, several times the adjacency itself), and on large sparse graphs its
coarsening removes few edges per level. Clustering nodes first by label
propagation (each node joins the cluster most of its neighbours are in, as long as
that cluster stays under a size cap), then contracting every cluster to one vertex
whose weights are the sums of its members' (one per balance constraint) and every
bundle of parallel edges to one weighted edge, hands METIS a graph of a few
thousand vertices. Partitioning it and projecting the result back costs a few
passes over the edges and little memory beyond the adjacency; the cut is usually a
little larger than METIS's own on the full graph.

All kernels are numba, O(edges) per pass, with no buffer as large as the adjacency.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numba
import numpy as np

_JIT = dict(cache=True, nogil=True)


#: nodes visited together by label propagation: blocks of consecutive ids in random
#: order, each shuffled, so the adjacency is read block by block (a memory map larger
#: than memory is then read about once per round instead of a page per node)
VISIT_BLOCK = 4096


@numba.njit(**_JIT)
def _visit_order(n, block):
    """A random order of ``0..n-1`` visiting blocks of ``block`` consecutive ids one
    after the other (uses numba's seeded generator)."""
    num_blocks = (n + block - 1) // block
    order = np.empty(n, dtype=np.int64)
    at = 0
    for b in np.random.permutation(num_blocks):
        lo = b * block
        hi = min(lo + block, n)
        order[at:at + hi - lo] = np.random.permutation(hi - lo) + lo
        at += hi - lo
    return order


@numba.njit(**_JIT)
def visit_order(n, block, seed):
    """:func:`_visit_order` after seeding numba's generator with ``seed``."""
    np.random.seed(seed)
    return _visit_order(n, block)


@numba.njit(**_JIT)
def best_label(u, xadj, adj, labels, score, touched, room):
    """The label most neighbours of ``u`` carry among labels with ``room`` left (> 0),
    when more carry it than ``u``'s own label; else ``u``'s own. ``score`` (zeros) and
    ``touched`` are scratch arrays over labels, left zeroed."""
    own = labels[u]
    m = 0
    for j in range(xadj[u], xadj[u + 1]):
        lab = labels[adj[j]]
        if score[lab] == 0:
            touched[m] = lab
            m += 1
        score[lab] += 1
    best, best_score = own, score[own]
    for t in range(m):
        lab = touched[t]
        if lab != own and score[lab] > best_score and room[lab] > 0:
            best, best_score = lab, score[lab]
    for t in range(m):
        score[touched[t]] = 0
    return best


@numba.njit(**_JIT)
def _propagate(xadj, adj, max_size, rounds, seed):
    """Cluster label per node (``0..k-1``) and ``k``; no cluster exceeds ``max_size``."""
    n = xadj.shape[0] - 1
    labels = np.arange(n)
    room = np.full(n, max_size - 1, dtype=np.int64)  # nodes each cluster may still take
    score = np.zeros(n, dtype=np.int64)
    touched = np.empty(n, dtype=np.int64)
    np.random.seed(seed)
    for _ in range(rounds):
        moved = 0
        order = _visit_order(n, VISIT_BLOCK)
        for i in range(n):
            u = order[i]
            own = labels[u]
            best = best_label(u, xadj, adj, labels, score, touched, room)
            if best != own:
                room[own] += 1
                room[best] -= 1
                labels[u] = best
                moved += 1
        if moved * 100 < n:  # fewer than 1% moved: converged
            break
    compact = np.full(n, -1, dtype=np.int64)
    k = 0
    for u in range(n):
        lab = labels[u]
        if compact[lab] < 0:
            compact[lab] = k
            k += 1
        labels[u] = compact[lab]
    return labels, k


@numba.njit(**_JIT)
def cluster_pairs(xadj, adj, labels, lo, hi):
    """``(cluster of u, cluster of v)`` for the adjacency entries of nodes ``[lo, hi)``
    whose clusters differ, in node order (``labels`` over every id ``adj`` holds)."""
    count = 0
    for u in range(lo, hi):
        for j in range(xadj[u], xadj[u + 1]):
            if labels[adj[j]] != labels[u]:
                count += 1
    out = np.empty((count, 2), dtype=np.int64)
    at = 0
    for u in range(lo, hi):
        for j in range(xadj[u], xadj[u + 1]):
            if labels[adj[j]] != labels[u]:
                out[at, 0] = labels[u]
                out[at, 1] = labels[adj[j]]
                at += 1
    return out


class KeySums:
    """Sums of counts per int64 key, from pieces: merged whenever what waits doubles
    what is merged (``n log n`` in all; memory about twice the distinct keys)."""

    def __init__(self, floor: int = 1 << 20) -> None:
        self.keys = np.empty(0, dtype=np.int64)
        self.sums = np.empty(0, dtype=np.int64)
        self._pending: list = []
        self._waiting, self._floor = 0, floor

    def add(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self._pending.append((keys, counts))
        self._waiting += keys.shape[0]
        if self._waiting > max(self.keys.shape[0], self._floor):
            self.merge()

    def merge(self) -> "KeySums":
        if self._pending:
            keys, inverse = np.unique(np.concatenate([self.keys] + [p[0] for p in
                                                                   self._pending]),
                                      return_inverse=True)
            sums = np.bincount(inverse, weights=np.concatenate(
                [self.sums] + [p[1] for p in self._pending]), minlength=keys.shape[0])
            self.keys, self.sums = keys, sums.astype(np.int64)
            self._pending, self._waiting = [], 0
        return self


def contract(xadj: np.ndarray, adj: np.ndarray, labels: np.ndarray, k: int,
             weights: np.ndarray, block: int = 1 << 22, limit: Optional[int] = None
             ) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The cluster graph: ``(xadj, adjncy, edge_weights, vertex_weights)`` (sorted rows,
    no self loops; an edge's weight counts the adjacency entries it bundles).

    The adjacency is read in node order, ``block`` entries at a time (a memory map is
    read once, in order). ``weights`` are the nodes' vertex weights, ``[num_nodes,
    ncon]``; a cluster's are the sums over its members. With ``limit``, returns ``None``
    as soon as the cluster graph has more than ``limit`` adjacency entries.
    """
    n, k = xadj.shape[0] - 1, int(k)
    sums = KeySums()
    step = max(1, block * max(n, 1) // max(int(xadj[-1]), 1))
    for lo in range(0, n, step):
        pairs = cluster_pairs(xadj, adj, labels, lo, min(lo + step, n))
        keys, counts = np.unique(pairs[:, 0] * k + pairs[:, 1], return_counts=True)
        sums.add(keys, counts.astype(np.int64))
        if limit is not None and sums.keys.shape[0] > limit:
            return None
    sums.merge()
    if limit is not None and sums.keys.shape[0] > limit:
        return None
    cxadj = np.concatenate([[0], np.cumsum(np.bincount(sums.keys // max(k, 1),
                                                       minlength=k))]).astype(np.int64)
    cvw = np.stack([np.bincount(labels[:n], weights=weights[:, i], minlength=k)
                    for i in range(weights.shape[1])], axis=1).astype(np.int64)
    return cxadj, sums.keys % max(k, 1), sums.sums, cvw


def cluster(xadj: np.ndarray, adj: np.ndarray, max_size: int, seed: int, rounds: int = 5
            ) -> Tuple[np.ndarray, int]:
    """Labels ``0..k-1`` of size-constrained label propagation, and ``k``.

    Args:
        xadj, adj: symmetric CSR adjacency (as METIS takes it).
        max_size (int): most nodes per cluster.
        seed (int): seed of the visiting order (deterministic for a given seed).
        rounds (int): most passes over the nodes.
    """
    return _propagate(xadj, adj, max(int(max_size), 1), int(rounds), int(seed))


@numba.njit(**_JIT)
def best_part(u, xadj, adj, parts, conn, group, train, room, train_room):
    """The partition most neighbours of ``u`` are in, when more are there than in
    ``u``'s own and it has room for ``u`` (``room[group, part] > 0``, and for a train
    node ``train_room[part] > 0``); else ``u``'s own. ``conn`` (zeros, one per
    partition) is left zeroed."""
    own = parts[u]
    for j in range(xadj[u], xadj[u + 1]):
        conn[parts[adj[j]]] += 1
    best, best_conn = own, conn[own]
    for p in range(conn.shape[0]):
        if conn[p] > best_conn and room[group[u], p] > 0 and \
                (not train[u] or train_room[p] > 0):
            best, best_conn = p, conn[p]
    conn[:] = 0
    return best


@numba.njit(**_JIT)
def _refine(parts, xadj, adj, group, train, num_parts, group_limit, train_limit, rounds):
    num_groups = group_limit.shape[0]
    room = np.empty((num_groups, num_parts), dtype=np.int64)  # nodes each may still take
    for g in range(num_groups):
        room[g, :] = group_limit[g]
    train_room = np.full(num_parts, train_limit, dtype=np.int64)
    n = parts.shape[0]
    for u in range(n):
        room[group[u], parts[u]] -= 1
        if train[u]:
            train_room[parts[u]] -= 1
    conn = np.zeros(num_parts, dtype=np.int64)
    for _ in range(rounds):
        moved = 0
        for u in range(n):
            own = parts[u]
            best = best_part(u, xadj, adj, parts, conn, group, train, room, train_room)
            if best != own:
                room[group[u], own] += 1
                room[group[u], best] -= 1
                if train[u]:
                    train_room[own] += 1
                    train_room[best] -= 1
                parts[u] = best
                moved += 1
        if moved == 0:
            break


def refine(parts: np.ndarray, xadj: np.ndarray, adj: np.ndarray, group: np.ndarray,
           train: np.ndarray, num_parts: int, tolerance: float = 0.03,
           train_tolerance: float = 0.05, rounds: int = 4) -> None:
    """Greedy boundary refinement after projecting a coarse partition (in place).

    Each node moves to the partition holding most of its neighbours when that cuts
    fewer edges and the destination stays within ``1 + tolerance`` of its share of
    the node's group (node type) and, for train nodes, ``1 + train_tolerance`` of its
    share of train nodes. A few passes recover most of the cut that clustering loses.
    """
    sizes = np.bincount(group)
    group_limit = np.ceil(sizes / num_parts * (1 + tolerance)).astype(np.int64)
    train_limit = int(np.ceil(int(train.sum()) / num_parts * (1 + train_tolerance)))
    _refine(parts, xadj, adj, group.astype(np.int64), train.astype(np.bool_), int(num_parts),
            np.maximum(group_limit, 1), max(train_limit, 1), int(rounds))


@numba.njit(**_JIT)
def _deal(sizes, order, num_parts):
    load = np.zeros(num_parts, dtype=np.int64)
    out = np.empty(sizes.shape[0], dtype=np.int64)
    for i in range(order.shape[0]):
        c = order[i]
        p = np.argmin(load)
        out[c] = p
        load[p] += sizes[c]
    return out


def deal_clusters(labels: np.ndarray, k: int, num_parts: int) -> np.ndarray:
    """The partition of every cluster, dealing the largest first to the least loaded
    partition (balanced by nodes; no cut objective: for graphs whose cluster graph is
    too large for METIS, i.e. with little community structure to find)."""
    return deal_sizes(np.bincount(labels, minlength=int(k)).astype(np.int64), num_parts)


def deal_sizes(sizes: np.ndarray, num_parts: int) -> np.ndarray:
    """:func:`deal_clusters` from the clusters' sizes alone."""
    sizes = np.asarray(sizes, dtype=np.int64)
    return _deal(sizes, np.argsort(-sizes, kind="stable"), int(num_parts))
