"""O(E) numba kernels used while partitioning (no global sort of the edge list)."""
from __future__ import annotations

from typing import Tuple

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def csc_relabel(src: np.ndarray, dst: np.ndarray, src_map: np.ndarray, dst_map: np.ndarray,
                num_dst: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Relabels an edge list and orders it by new destination id (a stable counting sort).

    Args:
        src, dst: original endpoint ids, one entry per edge.
        src_map, dst_map: original id -> new id, per endpoint type.
        num_dst: number of destination nodes.

    Returns:
        ``(indptr, indices, order)``: CSC pointers over new destination ids, new source
        ids in CSC order, and the original position of each CSC entry. Edges with the
        same destination keep their original relative order.
    """
    num_edges = src.shape[0]
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    for e in range(num_edges):
        indptr[dst_map[dst[e]] + 1] += 1
    for i in range(num_dst):
        indptr[i + 1] += indptr[i]
    cursor = indptr[:-1].copy()
    indices = np.empty(num_edges, dtype=np.int64)
    order = np.empty(num_edges, dtype=np.int64)
    for e in range(num_edges):
        d = dst_map[dst[e]]
        pos = cursor[d]
        cursor[d] = pos + 1
        indices[pos] = src_map[src[e]]
        order[pos] = e
    return indptr, indices, order


@numba.njit(cache=True, nogil=True)
def symmetric_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """Builds the undirected, loop-free, duplicate-free CSR adjacency METIS needs.

    Each edge ``(u, v)`` with ``u != v`` contributes ``v`` to ``u``'s list and ``u``
    to ``v``'s list; each list is then sorted and deduplicated in place.
    """
    deg = np.zeros(num_nodes + 1, dtype=np.int64)
    for e in range(src.shape[0]):
        u, v = src[e], dst[e]
        if u != v:
            deg[u + 1] += 1
            deg[v + 1] += 1
    for i in range(num_nodes):
        deg[i + 1] += deg[i]
    adj = np.empty(deg[num_nodes], dtype=np.int64)
    cursor = deg[:-1].copy()
    for e in range(src.shape[0]):
        u, v = src[e], dst[e]
        if u != v:
            adj[cursor[u]] = v
            cursor[u] += 1
            adj[cursor[v]] = u
            cursor[v] += 1
    xadj = np.zeros(num_nodes + 1, dtype=np.int64)
    out = 0
    for i in range(num_nodes):
        row = np.sort(adj[deg[i]:deg[i + 1]])
        last = -1
        for j in range(row.shape[0]):
            if row[j] != last:
                adj[out] = row[j]
                out += 1
                last = row[j]
        xadj[i + 1] = out
    return xadj, adj[:out].copy()


@numba.njit(cache=True, nogil=True)
def count_outside(indices: np.ndarray, lo: int, hi: int) -> int:
    """Number of entries outside ``[lo, hi)``."""
    n = 0
    for i in range(indices.shape[0]):
        if indices[i] < lo or indices[i] >= hi:
            n += 1
    return n


@numba.njit(cache=True, nogil=True)
def move_gain(xadj: np.ndarray, adj: np.ndarray, parts: np.ndarray, nodes: np.ndarray,
              src_part: int, dst_part: int) -> np.ndarray:
    """Cut-edge reduction of moving each of ``nodes`` from ``src_part`` to ``dst_part``."""
    gain = np.zeros(nodes.shape[0], dtype=np.int64)
    for i in range(nodes.shape[0]):
        v = nodes[i]
        g = 0
        for j in range(xadj[v], xadj[v + 1]):
            p = parts[adj[j]]
            if p == dst_part:
                g += 1
            elif p == src_part:
                g -= 1
        gain[i] = g
    return gain
