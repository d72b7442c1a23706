"""Edges bucketed by owner on disk, then each partition's CSC built in turn.

An edge belongs to the partition owning its destination (as in the in-memory
:class:`~pyg_dist.partition.Partitioner`). Streaming the edge chunks in order, each
edge's record ``(new source id, new destination id, original edge id)`` is appended
to its owner's bucket file through bounded buffers; a bucket therefore lists its
edges in original order, and a stable counting sort by destination gives exactly the
CSC order of the in-memory path (ties keep the original edge order).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, List, Tuple

import numba
import numpy as np

from pyg_dist.partition.outofcore.scratch import Scratch

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
    """
    indptr: np.ndarray
    indices: np.ndarray
    offset: int


@dataclass
class OrderedEdges:
    """One edge type after ordering: every partition's CSC (in scratch files), the
    edge map (new global edge id -> original id) and partition edge offsets."""
    parts: List[PartCSC] = field(default_factory=list)
    edge_map: np.ndarray = None  # type: ignore[assignment]
    offsets: Tuple[int, ...] = ()


def order_buckets(buckets: EdgeBuckets, node_offsets: Tuple[int, ...], num_edges: int,
                  scratch: Scratch, name: str) -> OrderedEdges:
    """Builds each partition's CSC from its bucket in turn (one bucket in memory at a
    time) into scratch files, and fills the edge map."""
    offsets = (0, *(int(x) for x in np.cumsum(buckets.counts)))
    out = OrderedEdges(edge_map=scratch.array(f"edge-map-{name}", np.int64, (num_edges,)),
                       offsets=offsets)
    for p in range(len(buckets.paths)):
        lo, hi = node_offsets[p], node_offsets[p + 1]
        indptr, indices, order = _csc(buckets.read(p), lo, hi - lo)
        out.edge_map[offsets[p]:offsets[p + 1]] = order
        keep_indptr = scratch.array(f"indptr-{name}-{p}", np.int64, indptr.shape)
        keep_indptr[:] = indptr
        keep_indices = scratch.array(f"indices-{name}-{p}", np.int64, indices.shape)
        keep_indices[:] = indices
        out.parts.append(PartCSC(keep_indptr, keep_indices, offsets[p]))
        buckets.paths[p].unlink(missing_ok=True)
    return out


def inverse_map(edge_map: np.ndarray, scratch: Scratch, name: str, block: int) -> np.ndarray:
    """Original edge id -> new global edge id, filled ``block`` entries at a time."""
    inverse = scratch.array(f"edge-inverse-{name}", np.int64, edge_map.shape)
    for lo in range(0, edge_map.shape[0], block):
        hi = min(lo + block, edge_map.shape[0])
        inverse[np.asarray(edge_map[lo:hi])] = np.arange(lo, hi, dtype=np.int64)
    return inverse


def bucket_type_edges(chunks: Iterable[Tuple[np.ndarray, np.ndarray]], src_map: np.ndarray,
                      dst_map: np.ndarray, dst_parts: np.ndarray,
                      buckets: EdgeBuckets) -> None:
    """Streams one edge type's ``(src, dst)`` chunks into ``buckets`` by destination owner.

    Args:
        chunks: iterable of ``(src, dst)`` int64 arrays (original ids), in edge order.
        src_map, dst_map: original -> new id of the source and destination types.
        dst_parts: partition of every destination node (original ids).
    """
    start = 0
    for src, dst in chunks:
        k = src.shape[0]
        records = np.empty((k, 3), dtype=np.int64)
        records[:, 0] = src_map[src]
        records[:, 1] = dst_map[dst]
        records[:, 2] = np.arange(start, start + k, dtype=np.int64)
        buckets.add(dst_parts[dst], records)
        start += k
    buckets.flush()

