"""Edges bucketed by owner on disk, then each partition's CSC built in turn.

An edge belongs to the partition owning its destination (as in the in-memory
:class:`~pyg_dist.partition.Partitioner`). Each partition's destinations are cut into
consecutive ranges whose in-edges fit the memory budget (from the in-degrees, counted
in one pass), so no partition is ever held whole. Streaming the edge chunks in order,
each edge's record ``(new source id, new destination id, original edge id)`` is
appended to its range's bucket file through bounded buffers; a bucket therefore lists
its edges in original order, and a stable counting sort by destination gives exactly
the CSC order of the in-memory path (ties keep the original edge order). The ranges of
a partition, in order, make its CSC.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

import numba
import numpy as np

from pyg_dist.partition._outofcore.budget import MemoryBudget
from pyg_dist.partition._outofcore.scratch import Scratch

RECORD_BYTES = 24  # int64 source, destination, edge id


class EdgeBuckets:
    """Per-partition bucket files of edge records, filled through bounded buffers.

    Args:
        scratch (Scratch): where the bucket files go.
        num_parts (int): number of partitions.
        buffer_bytes (int): records held in memory (all partitions together) before
            they are written out.
    """

    def __init__(self, scratch: Scratch, num_parts: int, buffer_bytes: int) -> None:
        self.paths: List[Path] = [scratch.path(f"bucket-{p}.bin") for p in range(num_parts)]
        self.counts = np.zeros(num_parts, dtype=np.int64)
        self.flushes = 0
        self._cap = max(buffer_bytes // RECORD_BYTES, 1)
        self._buffers: List[List[np.ndarray]] = [[] for _ in range(num_parts)]
        self._buffered = 0

    def add(self, parts: np.ndarray, records: np.ndarray) -> None:
        """Appends ``records`` (``[k, 3]`` int64) to the buckets ``parts`` names, keeping
        their order within each bucket."""
        order = np.argsort(parts, kind="stable")
        counts = np.bincount(parts, minlength=len(self.paths))
        for p, block in enumerate(np.split(records[order], np.cumsum(counts)[:-1])):
            if block.shape[0]:
                self._buffers[p].append(block)
        self.counts += counts
        self._buffered += records.shape[0]
        if self._buffered >= self._cap:
            self.flush()

    def flush(self) -> None:
        """Writes every buffered record to its bucket file."""
        for p, blocks in enumerate(self._buffers):
            if blocks:
                with open(self.paths[p], "ab") as f:
                    for block in blocks:
                        f.write(np.ascontiguousarray(block, dtype=np.int64).tobytes())
                blocks.clear()
        self._buffered = 0
        self.flushes += 1

    def read(self, part: int) -> np.ndarray:
        """The records of one bucket, ``[k, 3]``, in the order they were added."""
        if self.counts[part] == 0:
            return np.empty((0, 3), dtype=np.int64)
        records = np.fromfile(self.paths[part], dtype=np.int64).reshape(-1, 3)
        if records.shape[0] != self.counts[part]:
            raise RuntimeError(f"bucket file {self.paths[part]} holds {records.shape[0]} "
                               f"edges, expected {self.counts[part]}")
        return records


@numba.njit(cache=True, nogil=True)
def _csc(records: np.ndarray, lo: int, num_dst: int
         ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable counting sort of records by destination: ``(indptr, indices, order)``."""
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    for e in range(records.shape[0]):
        indptr[records[e, 1] - lo + 1] += 1
    for i in range(num_dst):
        indptr[i + 1] += indptr[i]
    cursor = indptr[:-1].copy()
    indices = np.empty(records.shape[0], dtype=np.int64)
    order = np.empty(records.shape[0], dtype=np.int64)
    for e in range(records.shape[0]):
        at = cursor[records[e, 1] - lo]
        indices[at] = records[e, 0]
        order[at] = records[e, 2]
        cursor[records[e, 1] - lo] += 1
    return indptr, indices, order


@dataclass
class PartCSC:
    """One partition's in-edges of one type, in CSC order over its owned destinations.

    Args:
        indptr: ``owned + 1`` pointers (from 0).
        indices: new global source ids.
        offset: the partition's first global edge id of this type.
        order: original edge ids, in CSC order (when not kept in an edge map).
    """
    indptr: np.ndarray
    indices: np.ndarray
    offset: int
    order: Optional[np.ndarray] = None


@dataclass
class OrderedEdges:
    """One edge type after ordering: every partition's CSC (in scratch files), the
    edge map (new global edge id -> original id) and partition edge offsets."""
    parts: List[PartCSC] = field(default_factory=list)
    edge_map: np.ndarray = None  # type: ignore[assignment]
    offsets: Tuple[int, ...] = ()


@numba.njit(cache=True, nogil=True)
def _ranges(indegree: np.ndarray, cap: int) -> np.ndarray:
    """Starts of consecutive node ranges holding at most ``cap`` in-edges each (a node
    with more is a range of its own), and the end."""
    n = indegree.shape[0]
    out = np.empty(n + 1, dtype=np.int64)
    k, acc = 1, 0
    out[0] = 0
    for i in range(n):
        if acc > 0 and acc + indegree[i] > cap:
            out[k] = i
            k += 1
            acc = 0
        acc += indegree[i]
    out[k] = n
    return out[:k + 1].copy()


def bucket_starts(indegree: np.ndarray, node_offsets: Sequence[int], parts: Sequence[int],
                  budget: MemoryBudget, bytes_per_edge: int, what: str
                  ) -> Tuple[np.ndarray, List[range]]:
    """Destination ranges (new ids) whose in-edges fit the budget when put in CSC order.

    Args:
        indegree: in-degree of every destination of ``parts``, in new id order (the
            nodes of ``parts``, which are consecutive, from ``node_offsets[parts[0]]``).
        node_offsets: partition offsets of the destination type.
        parts: the partitions (consecutive).
        bytes_per_edge: bytes held per edge while a range is ordered.

    Returns:
        the start of every range and the end of the last (absolute new ids), and per
        partition the ranges it is made of.

    Raises:
        MemoryBudgetError: a node with more in-edges than the budget can order.
    """
    if indegree.shape[0]:
        top = int(np.argmax(indegree))
        budget.check_ordered_edges(int(indegree[top]), f"node {top + node_offsets[parts[0]]} "
                                   f"(new id) of {what}", bytes_per_edge)
    cap = max(budget.total // bytes_per_edge, 1)
    first = node_offsets[parts[0]] if parts else 0
    starts, members, count = [], [], 0
    for p in parts:
        lo, hi = node_offsets[p], node_offsets[p + 1]
        cuts = _ranges(np.ascontiguousarray(indegree[lo - first:hi - first]), cap)[:-1] + lo
        cuts = cuts if hi > lo else cuts[:0]
        starts.append(cuts)
        members.append(range(count, count + cuts.shape[0]))
        count += cuts.shape[0]
    end = node_offsets[parts[-1] + 1] if parts else 0
    return np.concatenate(starts + [np.array([end], dtype=np.int64)]).astype(np.int64), members


def part_csc(buckets: EdgeBuckets, members: range, starts: np.ndarray, lo: int, hi: int,
             scratch: Scratch, name: str, sort_by_id: bool = False,
             order_out: Optional[np.ndarray] = None) -> PartCSC:
    """One partition's CSC from its buckets (destination ranges ``members``), one bucket
    in memory at a time; ties in edge id order (arrival order, or sorted by edge id with
    ``sort_by_id``). Original edge ids go to ``order_out`` (default: a new scratch array,
    in :attr:`PartCSC.order`)."""
    count = int(sum(int(buckets.counts[b]) for b in members))
    indptr = scratch.array(f"indptr-{name}", np.int64, (hi - lo + 1,))
    indices = scratch.array(f"indices-{name}", np.int64, (count,))
    order = order_out if order_out is not None else scratch.array(f"order-{name}", np.int64,
                                                                 (count,))
    at = 0
    for b in members:
        b_lo, b_hi = int(starts[b]), int(starts[b + 1])
        records = buckets.read(b)
        if sort_by_id:
            records = records[np.argsort(records[:, 2], kind="stable")]
        ip, ix, od = _csc(records, b_lo, b_hi - b_lo)
        del records
        indptr[b_lo - lo + 1:b_hi - lo + 1] = ip[1:] + at
        indices[at:at + ix.shape[0]] = ix
        order[at:at + od.shape[0]] = od
        at += ix.shape[0]
        buckets.paths[b].unlink(missing_ok=True)
    return PartCSC(indptr, indices, 0, order)


def order_buckets(buckets: EdgeBuckets, starts: np.ndarray, members: List[range],
                  node_offsets: Tuple[int, ...], num_edges: int, scratch: Scratch,
                  name: str) -> OrderedEdges:
    """Every partition's CSC from its buckets into scratch files, and the edge map."""
    counts = [int(sum(int(buckets.counts[b]) for b in m)) for m in members]
    offsets = (0, *(int(x) for x in np.cumsum(counts)))
    out = OrderedEdges(edge_map=scratch.array(f"edge-map-{name}", np.int64, (num_edges,)),
                       offsets=offsets)
    for p, m in enumerate(members):
        csc = part_csc(buckets, m, starts, node_offsets[p], node_offsets[p + 1], scratch,
                       f"{name}-{p}", order_out=out.edge_map[offsets[p]:offsets[p + 1]])
        out.parts.append(PartCSC(csc.indptr, csc.indices, offsets[p]))
    return out


def indegree(chunks: Iterable[Tuple[np.ndarray, np.ndarray]], num_dst: int) -> np.ndarray:
    """In-degree of every destination (original ids), counted chunk by chunk."""
    out = np.zeros(num_dst, dtype=np.int64)
    for _, dst in chunks:
        out += np.bincount(dst, minlength=num_dst)
    return out


def inverse_map(edge_map: np.ndarray, scratch: Scratch, name: str, block: int) -> np.ndarray:
    """Original edge id -> new global edge id, filled ``block`` entries at a time."""
    inverse = scratch.array(f"edge-inverse-{name}", np.int64, edge_map.shape)
    for lo in range(0, edge_map.shape[0], block):
        hi = min(lo + block, edge_map.shape[0])
        inverse[np.asarray(edge_map[lo:hi])] = np.arange(lo, hi, dtype=np.int64)
    return inverse


def bucket_type_edges(chunks: Iterable[Tuple[np.ndarray, np.ndarray]], src_map: np.ndarray,
                      dst_map: np.ndarray, starts: np.ndarray, buckets: EdgeBuckets) -> None:
    """Streams one edge type's ``(src, dst)`` chunks into ``buckets`` by destination range.

    Args:
        chunks: iterable of ``(src, dst)`` int64 arrays (original ids), in edge order.
        src_map, dst_map: original -> new id of the source and destination types.
        starts: the destination ranges (new ids, see :func:`bucket_starts`).
    """
    start = 0
    for src, dst in chunks:
        k = src.shape[0]
        records = np.empty((k, 3), dtype=np.int64)
        records[:, 0] = src_map[src]
        records[:, 1] = dst_map[dst]
        records[:, 2] = np.arange(start, start + k, dtype=np.int64)
        buckets.add(np.searchsorted(starts, records[:, 1], side="right") - 1, records)
        start += k
    buckets.flush()
