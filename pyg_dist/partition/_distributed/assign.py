"""Assigning nodes to partitions across ranks: the coarsen path of the one-machine
partitioner (:func:`~pyg_dist.partition._assign.assign_csr` with ``coarsen=True``),
with node-sized arrays only for each rank's own nodes.

1. cluster: size-constrained label propagation, each rank over its nodes, the labels
   of ghost nodes exchanged every round; a cluster's size is summed at the home of
   its label, and each rank may grow a cluster by at most its share of the room left,
   so no cluster passes the cap;
2. contract: cluster-graph edges are summed at their cluster's home rank and gathered
   on rank 0 with the clusters' weights (one per node type);
3. METIS on rank 0, in a child process (pymetis holds the GIL, which would silence
   the rank's heartbeat), or clusters dealt by size when the cluster graph exceeds the
   memory budget; every node follows its cluster;
4. refine and balance as the one-machine passes do (boundary moves within the
   node-type and train tolerances; node types, then training nodes evened out),
   with the counts summed over ranks and the moves shared among them.
"""
from __future__ import annotations

import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numba
import numpy as np

from pyg_dist.partition._assign import CLUSTERS_PER_PART, METIS_BYTES_PER_ADJACENCY_BYTE
from pyg_dist.partition._coarsen import (VISIT_BLOCK, KeySums, best_label, best_part,
                                        cluster_pairs, deal_sizes, visit_order)
from pyg_dist.partition._distributed.comm import ArrayComm, even_bounds, home_of, lookup, route
from pyg_dist.partition._distributed.graph import LocalGraph
from pyg_dist.partition._graph_kernels import move_gain, sorted_unique
from pyg_dist.partition._outofcore.scratch import Scratch
from pyg_dist.memory import release_free_memory

_JIT = dict(cache=True, nogil=True)


def _max_degree(xadj: np.ndarray) -> int:
    return int(np.diff(xadj).max(initial=0))


@numba.njit(**_JIT)
def _lp_round(xadj, adj, cid, order, quota, num_labels, max_degree):
    """One pass of label propagation over this rank's nodes (``cid``: compact label per
    slot, updated in place); a label gains at most ``quota`` nodes (``quota`` is used up
    in place). Returns moves."""
    score = np.zeros(num_labels, dtype=np.int64)
    touched = np.empty(max_degree + 1, dtype=np.int64)  # distinct labels around a node
    room = quota
    moved = 0
    for i in range(order.shape[0]):
        u = order[i]
        best = best_label(u, xadj, adj, cid, score, touched, room)
        if best != cid[u]:
            room[best] -= 1
            cid[u] = best
            moved += 1
    return moved


@numba.njit(**_JIT)
def _refine_round(xadj, adj, parts, n, group, train, quota, train_quota):
    """Boundary moves of this rank's nodes to the partition most neighbours are in,
    within ``quota[group, part]`` (and ``train_quota[part]`` for train nodes)."""
    conn = np.zeros(quota.shape[1], dtype=np.int64)
    moved = 0
    for u in range(n):
        best = best_part(u, xadj, adj, parts, conn, group, train, quota, train_quota)
        if best != parts[u]:
            quota[group[u], best] -= 1
            if train[u]:
                train_quota[best] -= 1
            parts[u] = best
            moved += 1
    return moved


class DistAssigner:
    """Computes every local node's partition (see the module docstring).

    Args:
        comm (ArrayComm): the ranks.
        graph (LocalGraph): this rank's adjacency.
        group (np.ndarray): node type index of each local node.
        train (np.ndarray): whether each local node trains.
        num_types (int): node types.
        num_parts (int): partitions.
        seed (int): seed of METIS and of the visiting orders.
        budget (int): bytes METIS may use on rank 0 for the cluster graph.
        scratch (Scratch): where rank 0 hands the cluster graph to METIS.
    """

    def __init__(self, comm: ArrayComm, graph: LocalGraph, group: np.ndarray, train: np.ndarray,
                 num_types: int, num_parts: int, seed: int, budget: int,
                 scratch: Scratch) -> None:
        self.comm, self.graph, self.group, self.train = comm, graph, group, train
        self.num_types, self.num_parts, self.seed = num_types, num_parts, seed
        self.budget, self.scratch = budget, scratch
        self.phases: Dict[str, float] = {}

    # ---- 1. clusters ---------------------------------------------------------------------
    def _sizes_at_home(self, labels: np.ndarray, block: int) -> np.ndarray:
        """Per local node id: how many nodes (all ranks) carry it as their label
        (counted ``block`` labels at a time)."""
        comm, g = self.comm, self.graph
        sizes = np.zeros(g.n, dtype=np.int64)

        def pieces():
            for lo in range(0, labels.shape[0], block):
                values, counts = np.unique(labels[lo:lo + block], return_counts=True)
                yield values, counts.astype(np.int64)

        for piece in comm.rounds(pieces(), "summing cluster sizes"):
            values, counts = piece if piece is not None else (np.empty(0, np.int64),) * 2
            got_labels, got_counts = route(comm, home_of(values, g.bounds), [values, counts],
                                           "summing cluster sizes")
            np.add.at(sizes, got_labels - g.lo, got_counts)
        return sizes

    def cluster(self, block: int, rounds: int = 5) -> Tuple[np.ndarray, int]:
        """Cluster id (``0..k-1``) per slot (local nodes, then ghosts) and ``k``."""
        comm, g = self.comm, self.graph
        total = int(g.bounds[-1])
        cap = -(-total // (CLUSTERS_PER_PART * self.num_parts))
        labels = np.arange(g.lo, g.hi, dtype=np.int64)
        for r in range(rounds):
            slot_labels = g.slots(comm, labels, "exchanging cluster labels")
            values = sorted_unique(slot_labels)  # compact ids: positions in ``values``
            cid = np.searchsorted(values, slot_labels).astype(g.adj.dtype, copy=False)
            del slot_labels
            sizes_home = self._sizes_at_home(labels, block)
            quota = lookup(comm, values, g.bounds, lambda k: sizes_home[k - g.lo],
                           "asking for cluster sizes", sorted_keys=True)
            del sizes_home
            np.subtract(cap, quota, out=quota)
            np.maximum(quota, 0, out=quota)
            quota //= comm.world
            order = visit_order(g.n, VISIT_BLOCK, (self.seed * 1009 + r) * 1013 + comm.rank)
            moved = _lp_round(g.xadj, g.adj, cid, order, quota, values.shape[0],
                              _max_degree(g.xadj))
            del order, quota
            labels = values[cid[:g.n]]
            del cid, values
            release_free_memory()
            moved = int(comm.allreduce(np.array([moved], dtype=np.int64),
                                       "counting moved nodes")[0])
            if moved * 100 < total:
                break
        sizes_home = self._sizes_at_home(labels, block)
        used = sizes_home > 0
        counts = comm.allgather(int(used.sum()), "numbering clusters")
        first = sum(counts[:comm.rank])
        compact = np.full(g.n, -1, dtype=np.int64)
        compact[used] = first + np.arange(int(used.sum()), dtype=np.int64)
        mine = lookup(comm, labels, g.bounds, lambda k: compact[k - g.lo], "numbering clusters")
        return g.slots(comm, mine, "exchanging cluster ids"), int(sum(counts))

    # ---- 2. cluster graph ----------------------------------------------------------------
    def _cluster_graph(self, cl: np.ndarray, k: int, block: int
                       ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """This rank's share (clusters homed here, ``even_bounds(k, world)``) of the
        cluster graph: sorted ``(cu, cv)`` keys and weights, summed over ranks.

        ``None`` on every rank as soon as one rank holds more entries than METIS may
        take within the budget (the ranks agree after every round), so a cluster graph
        too large for METIS is never held whole.
        """
        comm, g = self.comm, self.graph
        cbounds = even_bounds(k, comm.world)
        limit = self.budget // (8 * METIS_BYTES_PER_ADJACENCY_BYTE)

        def blocks():
            step = max(1, block // max(1, int(g.xadj[-1]) // max(g.n, 1) + 1))
            for lo in range(0, g.n, step):
                pairs = cluster_pairs(g.xadj, g.adj, cl, lo, min(lo + step, g.n))
                key, count = np.unique(pairs[:, 0] * k + pairs[:, 1], return_counts=True)
                yield key, count.astype(np.int64)

        sums = KeySums(floor=max(min(limit, 1 << 20), 1))  # merged at least every limit
        for piece in comm.rounds(blocks(), "summing cluster edges"):
            key, count = piece if piece is not None else (np.empty(0, np.int64),
                                                          np.empty(0, np.int64))
            sums.add(*route(comm, home_of(key // max(k, 1), cbounds), [key, count],
                            "summing cluster edges"))
            over = comm.allreduce(np.array([sums.keys.shape[0] > limit], dtype=np.int64),
                                  "summing cluster edges", "max")[0]
            if over:
                return None
        sums.merge()
        return sums.keys, sums.sums

    def _cluster_weights(self, cl: np.ndarray, k: int, cbounds: np.ndarray) -> np.ndarray:
        """``[clusters homed here, num_types]`` node counts per cluster and type."""
        comm, g = self.comm, self.graph
        key, count = np.unique(cl[:g.n] * self.num_types + self.group, return_counts=True)
        got_key, got_count = route(comm, home_of(key // self.num_types, cbounds),
                                   [key, count.astype(np.int64)], "summing cluster weights")
        lo = int(cbounds[comm.rank])
        size = int(cbounds[comm.rank + 1]) - lo
        flat = np.bincount(got_key - lo * self.num_types, weights=got_count,
                           minlength=size * self.num_types)
        return flat.astype(np.int64).reshape(size, self.num_types)

    def _to_root(self, array: np.ndarray, what: str) -> np.ndarray:
        """Every rank's ``array`` rows concatenated on rank 0 (empty elsewhere)."""
        empty = array[:0]
        got = self.comm.alltoallv([array if j == 0 else empty for j in range(self.comm.world)],
                                  what)
        return np.concatenate(got) if self.comm.rank == 0 else empty

    def coarse_parts(self, cl: np.ndarray, k: int, block: int) -> np.ndarray:
        """The partition of every local node from METIS on the cluster graph (or the
        clusters dealt by size when METIS would need more than the budget)."""
        comm, g = self.comm, self.graph
        graph = self._cluster_graph(cl, k, block)
        cbounds = even_bounds(k, comm.world)
        cvw_all = self._to_root(self._cluster_weights(cl, k, cbounds),
                                "gathering cluster weights")
        entries = None if graph is None else int(comm.allreduce(
            np.array([graph[0].shape[0]], dtype=np.int64), "counting cluster edges")[0])
        if entries is None or entries * 8 * METIS_BYTES_PER_ADJACENCY_BYTE > self.budget:
            if comm.rank == 0:
                warnings.warn(f"the graph has little community structure: METIS on its {k} "
                              f"clusters would need more than the "
                              f"{self.budget / 2**20:.1f} MiB allowed; dealing clusters to "
                              f"partitions by size and refining instead (a larger cut)",
                              stacklevel=2)
                cparts = deal_sizes(cvw_all.sum(1), self.num_parts)
        else:
            keys_all = self._to_root(graph[0], "gathering the cluster graph")
            weights_all = self._to_root(graph[1], "gathering the cluster graph")
            del graph
            if comm.rank == 0:
                start = time.perf_counter()
                cparts = self._metis(keys_all, weights_all, cvw_all, k)
                self.phases["metis"] = time.perf_counter() - start
        send = [cparts[cbounds[j]:cbounds[j + 1]] if comm.rank == 0 else np.empty(0, np.int64)
                for j in range(comm.world)]
        mine = np.concatenate(comm.alltoallv(send, "handing out the clusters' partitions"))
        lo = int(cbounds[comm.rank])
        return lookup(comm, cl[:g.n], cbounds, lambda c: mine[c - lo],
                      "asking for the clusters' partitions")

    def _metis(self, keys: np.ndarray, weights: np.ndarray, cvw: np.ndarray, k: int
               ) -> np.ndarray:
        """METIS on the cluster graph in a child process; the part of every cluster."""
        cu, cv = keys // k, keys % k
        xadj = np.concatenate([[0], np.cumsum(np.bincount(cu, minlength=k))]).astype(np.int64)
        folder = self.scratch.folder / "metis"
        folder.mkdir(exist_ok=True)
        for name, array in (("xadj", xadj), ("adjncy", cv), ("eweights", weights),
                            ("vweights", cvw)):
            np.save(folder / f"{name}.npy", np.ascontiguousarray(array, dtype=np.int64))
        job = Path(__file__).with_name("metis_job.py")  # by path: no pyg_dist (torch) import
        done = subprocess.run([sys.executable, str(job), str(folder), str(self.num_parts),
                               str(self.seed)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"METIS on the cluster graph ({k} clusters) failed with exit "
                               f"code {done.returncode}: {tail}")
        return np.load(folder / "parts.npy")

    # ---- 3. refine and balance -------------------------------------------------------------
    def _counts(self, parts: np.ndarray, what: str) -> Tuple[np.ndarray, np.ndarray]:
        """Global ``[num_types, num_parts]`` node counts and ``[num_parts]`` train counts."""
        n, P = self.graph.n, self.num_parts
        local = np.zeros((self.num_types + 1, P), dtype=np.int64)
        local[:-1] = np.bincount(self.group * P + parts[:n],
                                 minlength=self.num_types * P).reshape(self.num_types, P)
        local[-1] = np.bincount(parts[:n][self.train], minlength=P)
        total = self.comm.allreduce(local, what)
        return total[:-1], total[-1]

    def refine(self, parts: np.ndarray, rounds: int = 4, tolerance: float = 0.03,
               train_tolerance: float = 0.05) -> np.ndarray:
        """Boundary refinement (see :func:`~pyg_dist.partition._coarsen.refine`); ``parts``
        over slots; returns it updated."""
        comm, g, P = self.comm, self.graph, self.num_parts
        sizes = self.comm.allreduce(np.bincount(self.group, minlength=self.num_types),
                                    "counting nodes per type")
        group_limit = np.maximum(np.ceil(sizes / P * (1 + tolerance)), 1).astype(np.int64)
        n_train = int(comm.allreduce(np.array([self.train.sum()], dtype=np.int64),
                                     "counting train nodes")[0])
        train_limit = max(int(np.ceil(n_train / P * (1 + train_tolerance))), 1)
        for _ in range(rounds):
            counts, train_counts = self._counts(parts, "refining the partitions")
            quota = np.maximum(group_limit[:, None] - counts, 0) // comm.world
            train_quota = np.maximum(train_limit - train_counts, 0) // comm.world
            moved = _refine_round(g.xadj, g.adj, parts, g.n, self.group, self.train,
                                  quota, train_quota)
            parts = g.slots(comm, parts[:g.n], "exchanging partitions of ghost nodes")
            if int(comm.allreduce(np.array([moved], dtype=np.int64), "refining")[0]) == 0:
                break
        return parts

    def _shares(self, need: int, local: int, what: str) -> int:
        """This rank's part of ``need`` moves, in proportion to its ``local`` candidates
        (largest remainders; the same split on every rank)."""
        have = np.array(self.comm.allgather(local, what), dtype=np.int64)
        total = int(have.sum())
        if total == 0:
            return 0
        exact = need * have / total
        share = np.minimum(np.floor(exact).astype(np.int64), have)
        left = need - int(share.sum())
        for r in np.argsort(-(exact - share), kind="stable"):
            if left <= 0:
                break
            if share[r] < have[r]:
                share[r] += 1
                left -= 1
        return int(share[self.comm.rank])

    def _move(self, parts: np.ndarray, mask: np.ndarray, src: int, dst: int, need: int
              ) -> None:
        """Moves this rank's share of ``need`` nodes of ``mask`` from ``src`` to ``dst``,
        those cutting the fewest edges first."""
        g = self.graph
        movers = np.flatnonzero(mask & (parts[:g.n] == src))
        mine = self._shares(need, movers.shape[0], "sharing balance moves")
        if mine:
            gain = move_gain(g.xadj, g.adj, parts, movers, src, dst)
            parts[movers[np.argsort(-gain, kind="stable")[:mine]]] = dst

    def _excess(self, parts: np.ndarray, mask: np.ndarray, tolerance: float
                ) -> Tuple[int, int, int]:
        P = self.num_parts
        counts = self.comm.allreduce(np.bincount(parts[:self.graph.n][mask], minlength=P),
                                     "counting nodes per partition")
        limit = max(int(np.ceil(int(counts.sum()) / P * (1 + tolerance))), 1)
        src, dst = int(counts.argmax()), int(counts.argmin())
        need = int(min(counts[src] - limit, limit - counts[dst], counts[src] - counts[dst]))
        return src, dst, max(need, 0)

    def balance(self, parts: np.ndarray) -> np.ndarray:
        """:func:`~pyg_dist.partition._assign.balance_nodes` per node type, then
        :func:`~pyg_dist.partition._assign.balance_train`, across ranks."""
        g, P = self.graph, self.num_parts
        for t in range(self.num_types):
            mask = self.group == t
            for _ in range(4 * P):
                src, dst, need = self._excess(parts, mask, 0.03)
                if need == 0:
                    break
                self._move(parts, mask, src, dst, need)
                parts = g.slots(self.comm, parts[:g.n], "exchanging partitions of ghost nodes")
        has_train = self.comm.allreduce(np.array([self.train.any()], dtype=np.int64),
                                        "looking for train nodes", "max")[0]
        for _ in range(4 * P if has_train else 0):
            src, dst, need = self._excess(parts, self.train, 0.05)
            if need == 0:
                break
            self._move(parts, self.train, src, dst, need)
            self._move(parts, ~self.train, dst, src, need)
            parts = g.slots(self.comm, parts[:g.n], "exchanging partitions of ghost nodes")
        return parts

    # ---- all together ----------------------------------------------------------------------
    def metis(self, block: int) -> np.ndarray:
        """The partition of every local node (the coarsen path)."""
        start = time.perf_counter()
        cl, k = self.cluster(block)
        self.phases["coarsen"] = time.perf_counter() - start
        parts = self.coarse_parts(cl, k, block)
        start = time.perf_counter()
        parts = self.graph.slots(self.comm, parts, "exchanging partitions of ghost nodes")
        parts = self.refine(parts)
        parts = self.balance(parts)
        self.phases["balance"] = time.perf_counter() - start
        return np.ascontiguousarray(parts[:self.graph.n])


def random_local_parts(comm: ArrayComm, group: np.ndarray, train: np.ndarray, num_types: int,
                       num_parts: int, seed: int) -> np.ndarray:
    """Balanced random assignment across ranks: per node type, training nodes and the
    rest are each shuffled on their rank and dealt round robin, every rank starting
    where the ranks before it stopped."""
    rng = np.random.default_rng([seed, comm.rank])
    parts = np.empty(group.shape[0], dtype=np.int64)
    sets: List[np.ndarray] = []
    for t in range(num_types):
        for flag in (True, False):
            sets.append(np.flatnonzero((group == t) & (train == flag)))
    everyone = np.array(comm.allgather([s.shape[0] for s in sets], "dealing nodes at random"),
                        dtype=np.int64).reshape(comm.world, len(sets))
    for i, ids in enumerate(sets):
        start = int(everyone[:, :i].sum() + everyone[:comm.rank, i].sum())
        parts[rng.permutation(ids)] = (start + np.arange(ids.shape[0])) % num_parts
    return parts
