"""Each rank's share of the symmetric adjacency, and ghost exchanges.

Node ids are the combined id space of all node types (types in order). Rank ``r`` is
the *home* of ids ``[bounds[r], bounds[r + 1])``: it keeps their neighbour lists
(undirected, loop- and duplicate-free, as METIS sees the graph) in memory-mapped
scratch files, and per-node arrays for them only. A neighbour homed elsewhere is a
*ghost*: neighbour lists refer to local nodes as ``0..n-1`` and to ghosts as
``n + i`` (``ghosts[i]`` its global id), so a value per node and per ghost is one
array of ``n + len(ghosts)`` slots. :meth:`LocalGraph.ghost_values` fetches the
ghosts' current values from their homes with one all-to-all.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numba
import numpy as np

from pyg_dist.partition._distributed.comm import ArrayComm, home_of, route
from pyg_dist.partition._graph_kernels import dedup_rows
from pyg_dist.partition._common import type_offsets
from pyg_dist.partition._writer import distinct
from pyg_dist.partition._outofcore.scratch import Scratch, plain
from pyg_dist.partition._outofcore.source import ChunkedSource
from pyg_dist._typing import EdgeType


@dataclass
class EdgeFiles:
    """Which edge chunk files each rank reads, and where each file's edge ids start.

    Args:
        files: per edge type, the chunk indices this rank reads (a contiguous run).
        starts: per edge type, the first edge id of every chunk (and the total last).
        bounds: per edge type, ``world + 1`` edge id bounds: rank ``r`` reads edges
            ``[bounds[r], bounds[r + 1])``.
    """
    files: Dict[EdgeType, range]
    starts: Dict[EdgeType, np.ndarray]
    bounds: Dict[EdgeType, np.ndarray]

    @classmethod
    def share(cls, comm: ArrayComm, source: ChunkedSource) -> "EdgeFiles":
        """Deals every edge type's chunk files to ranks in contiguous runs and agrees on
        their edge counts (each rank counts its own files)."""
        files, starts, bounds = {}, {}, {}
        for et, name in source.edge_names.items():
            count = source.graph.num_edge_chunks(name)
            mine = range(count * comm.rank // comm.world, count * (comm.rank + 1) // comm.world)
            rows = [source.graph.edge_chunk_rows(name, i) for i in mine]
            everyone = comm.allgather(rows, f"counting the edge chunks of {name}")
            sizes = np.array([n for r in everyone for n in r], dtype=np.int64)
            starts[et] = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            firsts = [count * r // comm.world for r in range(comm.world + 1)]
            bounds[et] = starts[et][firsts]
            files[et] = mine
            if int(starts[et][-1]) != source.num_edges(et):
                from pyg_dist.chunked import ChunkedFormatError

                raise ChunkedFormatError(f"the edge chunks of {name} hold {starts[et][-1]} "
                                         f"edges, but metadata.json says "
                                         f"{source.num_edges(et)}")
        return cls(files, starts, bounds)

    def blocks(self, source: ChunkedSource, edge_type: EdgeType, block: int
               ) -> Iterator[Tuple[np.ndarray, np.ndarray, int]]:
        """``(src, dst, first edge id)`` of this rank's edges of one type, at most
        ``block`` edges at a time."""
        name = source.edge_names[edge_type]
        for i in self.files[edge_type]:
            src, dst = (t.numpy() for t in source.graph.read_edge_chunk(name, i))
            start = int(self.starts[edge_type][i])
            for lo in range(0, src.shape[0], block):
                yield src[lo:lo + block], dst[lo:lo + block], start + lo


#: most slots (local nodes and ghosts) a rank may have for int32 neighbour lists
MAX_INT32_SLOTS = 2**31 - 1


@numba.njit(cache=True, nogil=True)
def _fill(pairs: np.ndarray, lo: int, cursor: np.ndarray, buf: np.ndarray) -> None:
    for e in range(pairs.shape[0]):
        u = pairs[e, 0] - lo
        buf[cursor[u]] = pairs[e, 1]
        cursor[u] += 1


@numba.njit(cache=True, nogil=True)
def _to_slots(adj: np.ndarray, lo: int, hi: int, ghosts: np.ndarray, out: np.ndarray) -> None:
    n = hi - lo
    for i in range(adj.shape[0]):
        v = adj[i]
        if lo <= v < hi:
            out[i] = v - lo
        else:
            out[i] = n + np.searchsorted(ghosts, v)


@dataclass
class LocalGraph:
    """This rank's nodes ``[lo, hi)`` with their neighbour lists over local and ghost slots.

    Args:
        bounds: ``world + 1`` node id bounds of the homes.
        xadj: ``n + 1`` row pointers (in memory).
        adj: neighbour slots (a memory map, int32 while the slots fit).
        ghosts: sorted global ids of the ghosts.
        serve: per rank, the local nodes that rank keeps as ghosts (its order).
    """
    bounds: np.ndarray
    xadj: np.ndarray
    adj: np.ndarray
    ghosts: np.ndarray
    serve: List[np.ndarray]
    rank: int

    @property
    def lo(self) -> int:
        return int(self.bounds[self.rank])

    @property
    def hi(self) -> int:
        return int(self.bounds[self.rank + 1])

    @property
    def n(self) -> int:
        return self.hi - self.lo

    def ghost_values(self, comm: ArrayComm, values: np.ndarray, what: str) -> np.ndarray:
        """The ghosts' entries of a per-node array (``values`` holds this rank's nodes)."""
        got = comm.alltoallv([values[s] for s in self.serve], what)
        return np.concatenate(got) if got else values[:0]

    def slots(self, comm: ArrayComm, values: np.ndarray, what: str) -> np.ndarray:
        """``values`` of local nodes followed by the ghosts' (one array over slots)."""
        return np.concatenate([values, self.ghost_values(comm, values, what)])


def _assemble_windows(paths: List[Path], windows: np.ndarray, scratch: Scratch
                      ) -> Tuple[np.ndarray, Path]:
    """Row pointers of the local nodes and the file of their sorted, deduplicated
    neighbour lists (global ids), built one window of rows at a time from its pairs."""
    lo, n = int(windows[0]), int(windows[-1] - windows[0])
    xadj = np.zeros(n + 1, dtype=np.int64)
    lists_path = scratch.path("neighbours.bin")
    with open(lists_path, "wb") as out:
        for w, path in enumerate(paths):
            w_lo, w_hi = int(windows[w]), int(windows[w + 1])
            pairs = np.fromfile(path, dtype=np.int64).reshape(-1, 2) \
                if path.exists() else np.empty((0, 2), dtype=np.int64)
            path.unlink(missing_ok=True)
            ptr = np.concatenate([[0], np.cumsum(np.bincount(pairs[:, 0] - w_lo,
                                                             minlength=w_hi - w_lo))])
            buf = np.empty(pairs.shape[0], dtype=np.int64)
            _fill(pairs, w_lo, ptr[:-1].copy(), buf)
            del pairs
            rows = dedup_rows(ptr.astype(np.int64), buf)
            out.write(buf[:rows[-1]].tobytes())
            xadj[w_lo - lo + 1:w_hi - lo + 1] = rows[1:] + xadj[w_lo - lo]
            del buf
    return xadj, lists_path


def _slot_lists(lists_path: Path, size: int, lo: int, hi: int, block: int, scratch: Scratch
                ) -> Tuple[np.ndarray, np.ndarray]:
    """The sorted ghost ids and the neighbour lists over slots (a memory map; int32
    while the slots fit), read from the lists file ``block`` entries at a time; the
    file is removed."""
    lists = np.memmap(lists_path, dtype=np.int64, mode="r", shape=(size,)) if size else \
        np.empty(0, dtype=np.int64)
    ghosts = distinct(piece[(piece < lo) | (piece >= hi)] for piece in
                      (np.asarray(lists[s:min(s + block, size)]) for s in range(0, size, block)))
    dtype = np.int32 if hi - lo + ghosts.shape[0] <= MAX_INT32_SLOTS else np.int64
    adj = plain(scratch.array("adjacency", dtype, (size,)))
    for s in range(0, size, block):
        _to_slots(np.asarray(lists[s:min(s + block, size)]), lo, hi, ghosts,
                  adj[s:min(s + block, size)])
    del lists
    lists_path.unlink(missing_ok=True)
    return ghosts, adj


def build_local_graph(comm: ArrayComm, source: ChunkedSource, files: EdgeFiles, scratch: Scratch,
                      block: int, window_bytes: int) -> LocalGraph:
    """Streams this rank's edge chunks, sends both directions of every edge to the home
    of its first end, and builds the local neighbour lists (bounded rounds).

    Arriving pairs are appended to one file per window of rows (sized so a window's
    pairs and lists fit ``window_bytes``); each window's lists are then built in memory
    and written in order, so no memory map larger than memory is written at random.
    """
    offsets = type_offsets(source.num_nodes)
    total = source.total_nodes
    bounds = np.array([total * r // comm.world for r in range(comm.world + 1)], dtype=np.int64)
    lo, hi = int(bounds[comm.rank]), int(bounds[comm.rank + 1])
    n = hi - lo
    expected = 2 * sum(source.num_edges(et) for et in source.edge_names) // comm.world
    num_windows = max(1, min(n, -(-expected * 24 // max(window_bytes, 1))))
    windows = lo + np.array([n * w // num_windows for w in range(num_windows + 1)],
                            dtype=np.int64)
    paths = [scratch.path(f"pairs-{w}.bin") for w in range(num_windows)]

    def chunks() -> Iterator[np.ndarray]:
        for et in source.edge_names:
            for src, dst, _ in files.blocks(source, et, block):
                u, v = src + offsets[et[0]], dst + offsets[et[2]]
                keep = u != v
                u, v = u[keep], v[keep]
                yield np.concatenate([np.stack([u, v], 1), np.stack([v, u], 1)])

    what = "sending edges to their nodes' ranks"
    for pairs in comm.rounds(chunks(), what):
        pairs = np.empty((0, 2), dtype=np.int64) if pairs is None else pairs
        got, = route(comm, home_of(pairs[:, 0], bounds), [pairs], what)
        window = np.searchsorted(windows, got[:, 0], side="right") - 1
        order = np.argsort(window, kind="stable")
        cuts = np.cumsum(np.bincount(window, minlength=num_windows))[:-1]
        for w, piece in enumerate(np.split(got[order], cuts)):
            if piece.shape[0]:
                with open(paths[w], "ab") as out:
                    out.write(np.ascontiguousarray(piece, dtype=np.int64).tobytes())
    xadj, lists_path = _assemble_windows(paths, windows, scratch)
    ghosts, adj = _slot_lists(lists_path, int(xadj[-1]), lo, hi, block, scratch)
    dest = home_of(ghosts, bounds)
    cuts = np.cumsum(np.bincount(dest, minlength=comm.world))[:-1]
    asked = comm.alltoallv(np.split(ghosts, cuts), "agreeing on ghost nodes")
    serve = [(a - lo).astype(adj.dtype) for a in asked]
    return LocalGraph(bounds, xadj, adj, ghosts, serve, comm.rank)
