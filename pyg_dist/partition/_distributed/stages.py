"""The pipeline's stages (:mod:`pyg_dist.partition._pipeline`) for a chunked graph that
the ranks of a multi-machine partitioning share (see
:mod:`pyg_dist.partition._distributed.dist_partitioner` for the steps).

A rank reads a contiguous run of every edge type's chunk files and is the *home* of a
contiguous range of node ids (all node types in one id space); it keeps arrays for
those nodes and for the partitions it writes only. Every step is a series of bounded
collective rounds over :class:`~pyg_dist.partition._distributed.comm.ArrayComm`.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from pyg_dist.partition._common import type_offsets
from pyg_dist.partition._distributed.assign import DistAssigner, random_local_parts
from pyg_dist.partition._distributed.comm import home_of, lookup, route
from pyg_dist.partition._distributed.graph import EdgeFiles, build_local_graph
from pyg_dist.partition._distributed.row_exchange import RowExchange
from pyg_dist.partition._distributed.team import RankTeam, writer_of
from pyg_dist.partition._outofcore.budget import MemoryBudget
from pyg_dist.partition._outofcore.edges import EdgeBuckets, bucket_starts, part_csc
from pyg_dist.partition._outofcore.scratch import Scratch
from pyg_dist.partition._outofcore.source import ChunkedSource
from pyg_dist.partition._pipeline import Edges, HaloRows, Ids, Nodes
from pyg_dist.partition._writer import PartHalo, PartPieces, part_halo
from pyg_dist._typing import EdgeType, NodeType

#: bytes held per edge while a destination range is put in CSC order: its records, the
#: sort by edge id (permutation and sorted copy) and the CSC arrays
BYTES_PER_SORTED_EDGE = 96
#: bytes held per edge in one exchange round (the block read, its lookups, the
#: records sent and received, and their sorting)
BYTES_PER_ROUND_EDGE = 256


@dataclass(frozen=True)
class NodeRanges:
    """What a rank keeps of one node type after relabelling beyond its home nodes' new
    ids (:attr:`DistStages.numbers`): the partition offsets."""
    offsets: Tuple[int, ...]


@dataclass
class RankEdges:
    """One edge type in CSC order, as a rank holds it.

    Args:
        offsets: partition edge offsets.
        csc: ``(indptr, indices)`` of every partition the rank writes.
        edge_ids: original edge ids of every partition the rank writes.
    """
    offsets: Tuple[int, ...]
    csc: Dict[int, Tuple[np.ndarray, np.ndarray]]
    edge_ids: Dict[int, np.ndarray]


class DistStages(RowExchange):
    """:class:`~pyg_dist.partition._pipeline.Stages` of one rank: every step exchanges
    what it needs with the other ranks of ``team``; the rank writes ``team.parts``.

    Args:
        source (ChunkedSource): the opened folder.
        budget (MemoryBudget): this rank's budget.
        team (RankTeam): the ranks.
        num_parts (int): number of partitions.
        method (str): ``"metis"`` or ``"random"``.
        seed (int): seed of every random choice.
        halo_attrs (Iterable[str]): node attributes also stored for halo nodes.
    """
    copies_rows = True

    def __init__(self, source: ChunkedSource, budget: MemoryBudget, team: RankTeam,
                 num_parts: int, method: str, seed: int, halo_attrs: Iterable[str]) -> None:
        self.schema = self.source = source
        self.budget, self.team, self.comm = budget, team, team.comm
        self.num_parts, self.method, self.seed = num_parts, method, seed
        self.halo_attrs = tuple(halo_attrs)
        self.block = max(budget.total // (4 * BYTES_PER_ROUND_EDGE), 64)
        self.mine: List[int] = team.parts(num_parts)
        self.scratch: Optional[Scratch] = None
        self.numbers: Optional[np.ndarray] = None
        self.parts_held: Dict[int, PartPieces] = {}
        self.halos: Dict[int, Tuple[PartHalo, HaloRows]] = {}

    def open(self, tmp: Path) -> None:
        self.scratch = Scratch(tmp / f".scratch-{self.comm.rank}")

    def close(self) -> None:
        self.parts_held, self.halos = {}, {}
        shutil.rmtree(self.scratch.folder, ignore_errors=True)

    def part_ids(self, part: int, nodes: Nodes, edges: Edges) -> Ids:
        return self.parts_held[part].node_ids, self.parts_held[part].edge_ids

    def pieces(self, part: int, nodes: Nodes, edges: Edges) -> PartPieces:
        return self.parts_held[part]

    def halo(self, part: int, pieces: PartPieces, nodes: Nodes) -> Tuple[PartHalo, HaloRows]:
        return self.halos[part]

    # ---- 1. assign -------------------------------------------------------------------------
    def _local_nodes(self) -> Tuple[np.ndarray, np.ndarray, Dict[NodeType, Tuple[int, int]]]:
        """Node type index and train flag of this rank's nodes, and per type the
        (type-relative) range of its nodes."""
        src, comm = self.source, self.comm
        total = src.total_nodes
        lo, hi = total * comm.rank // comm.world, total * (comm.rank + 1) // comm.world
        group = np.empty(hi - lo, dtype=np.int64)
        train = np.zeros(hi - lo, dtype=bool)
        ranges = {}
        block = self.budget.block_rows(1)
        for i, (t, off) in enumerate(type_offsets(src.num_nodes).items()):
            a, b = max(lo, off), min(hi, off + src.num_nodes[t])
            a, b = (a, b) if a < b else (a, a)
            ranges[t] = (a - off, b - off)
            group[a - lo:b - lo] = i
            if "train" + "_mask" in src.mask_names(t):
                for s in range(a, b, block):
                    e = min(s + block, b)
                    train[s - lo:e - lo] = src.node_rows(t, "train_mask", s - off, e - off)
        return group, train, ranges

    def assign(self) -> Tuple[np.ndarray, Dict[str, float]]:
        """The partition of this rank's nodes, and the seconds of the assigner's steps."""
        comm, scratch = self.comm, self.scratch
        start = time.perf_counter()
        self.files = EdgeFiles.share(comm, self.source)
        group, train, self.node_ranges = self._local_nodes()
        self.group = group
        phases: Dict[str, float] = {}
        types = len(self.source.num_nodes)
        if self.num_parts == 1:
            return np.zeros(group.shape[0], dtype=np.int64), phases
        if self.method == "random":
            return random_local_parts(comm, group, train, types, self.num_parts,
                                      self.seed), phases
        graph = build_local_graph(comm, self.source, self.files, scratch, self.block,
                                  self.budget.total // 4)
        phases["adjacency"] = time.perf_counter() - start
        assigner = DistAssigner(comm, graph, group, train, types, self.num_parts, self.seed,
                                self.budget.total, scratch)
        parts = assigner.metis(self.block)
        phases.update(assigner.phases)
        Scratch.drop(graph.adj)
        return parts, phases

    # ---- 2. relabel ------------------------------------------------------------------------
    def relabel(self, parts: np.ndarray) -> Dict[NodeType, NodeRanges]:
        """Keeps ``[n, 2]`` (new type-relative id, partition) of this rank's nodes in
        :attr:`numbers`; returns the partition offsets of every node type."""
        comm, P = self.comm, self.num_parts
        types = list(self.source.num_nodes)
        counts = np.zeros((len(types), P), dtype=np.int64)
        for i in range(len(types)):
            counts[i] = np.bincount(parts[self.group == i], minlength=P)
        everyone = np.array(comm.allgather(counts.tolist(), "numbering nodes"),
                            dtype=np.int64).reshape(comm.world, len(types), P)
        totals = everyone.sum(0)
        offsets = {t: tuple(int(x) for x in np.concatenate([[0], np.cumsum(totals[i])]))
                   for i, t in enumerate(types)}
        numbers = np.empty((parts.shape[0], 2), dtype=np.int64)
        numbers[:, 1] = parts
        for i, t in enumerate(types):
            idx = np.flatnonzero(self.group == i)
            tp = parts[idx]
            base = np.array(offsets[t][:-1], dtype=np.int64) + everyone[:comm.rank, i].sum(0)
            order = np.argsort(tp, kind="stable")
            starts = np.concatenate([[0], np.cumsum(np.bincount(tp, minlength=P))[:-1]])
            ranked = np.arange(idx.shape[0], dtype=np.int64) - starts[tp[order]]
            numbers[idx[order], 0] = base[tp[order]] + ranked
        self.numbers = numbers
        return {t: NodeRanges(o) for t, o in offsets.items()}

    def _numbers_of(self, ids: np.ndarray, what: str) -> np.ndarray:
        """``[k, 2]`` (new id, partition) of combined node ids, from their homes."""
        total, numbers = self.source.total_nodes, self.numbers
        bounds = np.array([total * r // self.comm.world for r in range(self.comm.world + 1)],
                          dtype=np.int64)
        lo = int(bounds[self.comm.rank])
        return lookup(self.comm, ids, bounds, lambda k: numbers[k - lo], what)

    # ---- 3. edges --------------------------------------------------------------------------
    def order_edges(self, edge_type: EdgeType, nodes: Nodes) -> RankEdges:
        """Destination ranges that fit the budget (from in-degrees counted at the nodes'
        homes), records sent to the writer of their destination's partition and bucketed
        by range, then each partition's CSC built range by range."""
        comm, P, scratch = self.comm, self.num_parts, self.scratch
        et, name = edge_type, self.source.edge_names[edge_type]
        offsets = type_offsets(self.source.num_nodes)
        writers = np.array([writer_of(p, P, comm.world) for p in range(P)], dtype=np.int64)
        what = f"sending edges of {name} to their partitions"
        dst_offsets = nodes[et[2]].offsets
        starts, members = self._ranges(et, dst_offsets)
        buckets = EdgeBuckets(scratch, max(len(starts) - 1, 1), self.budget.buffer_bytes)
        for block in comm.rounds(self.files.blocks(self.source, et, self.block), what):
            src, dst, eid0 = block if block is not None else (
                np.empty(0, np.int64), np.empty(0, np.int64), 0)
            found = self._numbers_of(np.concatenate(
                [src + offsets[et[0]], dst + offsets[et[2]]]), what)
            k = src.shape[0]
            records = np.empty((k, 3), dtype=np.int64)
            records[:, 0] = found[:k, 0]
            records[:, 1] = found[k:, 0]
            records[:, 2] = eid0 + np.arange(k, dtype=np.int64)
            got, = route(comm, writers[found[k:, 1]], [records], what)
            if got.shape[0]:
                buckets.add(np.searchsorted(starts, got[:, 1], side="right") - 1, got)
        buckets.flush()
        counts = {p: int(sum(int(buckets.counts[b]) for b in m))
                  for p, m in zip(self.mine, members)}
        per_part = self.team.gather(counts, f"counting the edges of {name}")
        edges = RankEdges(tuple(int(x) for x in np.concatenate([[0], np.cumsum(per_part)])),
                          {}, {})
        for p, m in zip(self.mine, members):
            part = part_csc(buckets, m, starts, dst_offsets[p], dst_offsets[p + 1], scratch,
                            f"{name}-{p}", sort_by_id=True)
            edges.csc[p], edges.edge_ids[p] = (part.indptr, part.indices), part.order
        return edges

    def _ranges(self, edge_type: EdgeType, offsets: Tuple[int, ...]
                ) -> Tuple[np.ndarray, List[range]]:
        """:func:`~pyg_dist.partition._outofcore.edges.bucket_starts` of this rank's
        partitions (``offsets``: the destination type's): in-degrees are counted at the
        destinations' homes (one pass over the edges), then sent to the writers."""
        comm, src = self.comm, self.source
        name, dst_type = src.edge_names[edge_type], edge_type[2]
        total = src.total_nodes
        bounds = np.array([total * r // comm.world for r in range(comm.world + 1)],
                          dtype=np.int64)
        lo = int(bounds[comm.rank])
        first = type_offsets(src.num_nodes)[dst_type]
        degree = np.zeros(int(bounds[comm.rank + 1]) - lo, dtype=np.int64)
        what = f"counting the in-edges of {name}"
        for block in comm.rounds(self.files.blocks(src, edge_type, self.block), what):
            dst = (block[1] if block is not None else np.empty(0, np.int64)) + first
            got, = route(comm, home_of(dst, bounds), [dst], what)
            degree += np.bincount(got - lo, minlength=degree.shape[0])
        mine = {p: np.zeros(offsets[p + 1] - offsets[p], dtype=np.int64) for p in self.mine}
        what = f"sending in-degrees of {name}"
        for piece in comm.rounds(self._node_blocks(dst_type, self.block), what):
            a, b = piece if piece is not None else (0, 0)
            local = np.arange(a, b, dtype=np.int64) + first - lo
            self._send_rows(self.numbers[local, 0], degree[local], offsets, mine, what)
        ordered = np.concatenate([mine[p] for p in self.mine]) if self.mine else \
            np.empty(0, np.int64)
        return bucket_starts(ordered, offsets, self.mine, self.budget, BYTES_PER_SORTED_EDGE,
                             f"edge type {name}")

    # ---- 4. rows ---------------------------------------------------------------------------
    def copy_rows(self, nodes: Nodes, edges: Mapping[EdgeType, RankEdges]) -> None:
        """Node and edge data rows sent to the writers of their partitions; then the
        halos of this rank's partitions, and their rows asked from the writers of the
        partitions owning them."""
        node_offsets = {t: o.offsets for t, o in nodes.items()}
        node_rows, node_ids = self._node_rows(self.numbers, node_offsets, self.scratch)
        self.numbers = None
        edge_ids = {et: e.edge_ids for et, e in edges.items()}
        edge_rows = self._edge_rows(edge_ids, {et: e.offsets for et, e in edges.items()},
                                    self.scratch)
        self.parts_held = {p: PartPieces(
            csc={et: e.csc[p] for et, e in edges.items()},
            node_rows={t: {k: a[p] for k, a in v.items()} for t, v in node_rows.items()},
            edge_rows={et: {k: a[p] for k, a in v.items()} for et, v in edge_rows.items()},
            node_ids={t: v[p] for t, v in node_ids.items()},
            edge_ids={et: v[p] for et, v in edge_ids.items()}) for p in self.mine}
        halos = {p: part_halo(self.source, p, self.parts_held[p], node_offsets, self.block)
                 for p in self.mine}
        rows = self._halo_rows(halos, node_rows, node_offsets)
        self.halos = {p: (halos[p], rows[p]) for p in self.mine}
