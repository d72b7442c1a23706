"""One hop over every partition this process reads, in one pass, in frontier order.

A process samples its own partition and, on the same machine, the partitions it reads
directly (:mod:`pyg_dist.sampler._direct`). Asking each of them in turn means splitting
the frontier by owner, one kernel call per partition, and merging the pieces back into a
single machine's order (:mod:`pyg_dist.sampler._runs`): with two partitions on a machine
that is a good part of a batch. When every node of a hop's frontier is owned by a
partition read here, one kernel walks the frontier in order instead, each seed on its
owner's CSC: the edges come out in a single machine's order, with nothing to split or
merge.

The draws are exactly those of the per-partition path: each partition's seeds consume
its own random stream (seeded as its request would be, :func:`stream_seeds`) in frontier
order, as its kernel call would. So a batch is the same whichever partitions a process
reads directly and whichever path ran.

Only uniform neighbour sampling (with or without replacement, disjoint or not) runs
here; weighted, temporal and LABOR hops take the per-partition path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numba
import numpy as np
import torch
from torch import Tensor

from pyg_dist.format._schema import PartitionFormatError
from pyg_dist.sampler import _direct as direct, _timing as timing
from pyg_dist.sampler._addresses import load as _load, load64 as _load64, prefetch_at as _prefetch_at
from pyg_dist.sampler._checks import check_csc, check_edge_values, check_values_out
from pyg_dist.sampler._hop_state import EdgePiece, HopState
from pyg_dist.sampler._sample_kernels import (_FLOYD_MAX, _GOLDEN, PREFETCH_AHEAD, _below,
                                             _fisher_yates, _floyd, _mix)
from pyg_dist.sampler._types import HopRequest, HopResponse
from pyg_dist._typing import EdgeType, edge_key

_JIT = dict(cache=True, nogil=True)
#: seeds between a prefetch of a seed's edges and their reads (~16 edges at fan-out 5)
_SEEDS_AHEAD = 3
#: the columns of :attr:`JointTables.arrays`: per slot, the data addresses of its CSC's
#: ``indptr`` and ``indices`` and of its edges' values, their element sizes, its number
#: of destination rows and its edge offset
_INDPTR, _INDICES, _VALUES, _INDICES_BYTES, _VALUES_BYTES, _ROWS, _EDGE_OFFSET = range(7)
#: the request of partition ``p`` seeds its streams with ``rng_seed + PART_STRIDE * p``
PART_STRIDE = 7919


@numba.njit(**_JIT)
def _owner(offsets, key):
    """The partition whose id range ``offsets[p] <= key < offsets[p + 1]`` holds ``key``
    (``-1`` outside every range)."""
    if key < offsets[0] or key >= offsets[-1]:
        return -1
    lo, hi = 0, offsets.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if offsets[mid] <= key:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(**_JIT)
def _rows(arrays, offsets, slot_of, seeds, fanout, replace, per_slot):
    """Per seed: its slot (partition read here), CSC start, degree and draws; counts
    each slot's seeds into ``per_slot``. Returns a negative position ``-(i + 1)`` of
    the first seed no slot owns (``0``: all owned)."""
    n = seeds.shape[0]
    slot = np.empty(n, dtype=np.int64)
    start = np.empty(n, dtype=np.int64)  # first the seed's row, then its CSC start
    deg = np.empty(n, dtype=np.int64)
    counts = np.empty(n, dtype=np.int64)
    for i in range(n):  # owners first (no cache misses), so the rows can be prefetched
        p = _owner(offsets, seeds[i])
        s = slot_of[p] if p >= 0 else -1
        if s < 0 or seeds[i] - offsets[p] >= arrays[s, _ROWS]:
            return slot, start, deg, counts, -(i + 1)
        slot[i], start[i] = s, seeds[i] - offsets[p]
        per_slot[s] += 1
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            _prefetch_at(arrays[slot[i + PREFETCH_AHEAD], _INDPTR] + 8 * start[i + PREFETCH_AHEAD])
        indptr = arrays[slot[i], _INDPTR]
        a = _load64(indptr, start[i])
        d = _load64(indptr, start[i] + 1) - a
        start[i], deg[i] = a, d
        if fanout < 0 or (not replace and d <= fanout):
            counts[i] = d
        else:
            counts[i] = fanout if d > 0 else 0
    return slot, start, deg, counts, 0


@numba.njit(**_JIT)
def _positions(slot, start, deg, counts, fanout, replace, streams):
    """The drawn CSC positions of every seed's edges, seeds in order, each slot's seeds
    on ``streams[slot]`` (as :func:`~pyg_dist.sampler._sample_kernels._uniform_sample`
    draws them); ``start[i]`` becomes where seed ``i``'s edges start in them."""
    total = 0
    for i in range(counts.shape[0]):
        total += counts[i]
    pos = np.empty(total, dtype=np.int64)
    st = streams.copy()
    scratch = np.empty(0, dtype=np.int64)
    at = 0
    for i in range(slot.shape[0]):
        s, a, d, k = slot[i], start[i], deg[i], counts[i]
        start[i] = at  # from here on: where the seed's edges start in the output
        if k == d and not (replace and fanout >= 0):
            for j in range(k):
                pos[at + j] = a + j
        elif replace:
            x = st[s]
            for j in range(k):
                x += _GOLDEN
                pos[at + j] = a + _below(_mix(x), d)
            st[s] = x
        elif k <= _FLOYD_MAX:
            st[s] = _floyd(st[s], d, k, pos, at, a)
        else:
            if scratch.shape[0] < d:
                scratch = np.empty(d, dtype=np.int64)
            st[s] = _fisher_yates(st[s], d, k, scratch, pos, at, a)
        at += k
    return pos


@numba.njit(**_JIT)
def _joint_uniform(arrays, offsets, slot_of, seeds, fanout, replace, streams, gather, out):
    """Uniform draws for ``seeds`` (global ids, any owner read here: ``slot_of[p]`` is
    partition ``p``'s slot, ``-1`` if not read here; ``arrays``: per slot, see
    :class:`JointTables`). Each slot's seeds consume ``streams[slot]`` in order, as
    :func:`~pyg_dist.sampler._sample_kernels._uniform_sample` would on that slot's seeds
    alone. Returns counts, neighbours, global edge ids, the edges' values (with
    ``gather``; into the front of ``out`` when it is long enough), the lowest and
    highest neighbour and value, each slot's number of seeds and the status of
    :func:`_rows`."""
    per_slot = np.zeros(streams.shape[0], dtype=np.int64)
    slot, start, deg, counts, status = _rows(arrays, offsets, slot_of, seeds, fanout, replace,
                                             per_slot)
    if status < 0:
        empty = np.empty(0, dtype=np.int64)
        return counts, empty, empty, empty, np.zeros(4, np.int64), per_slot, status
    pos = _positions(slot, start, deg, counts, fanout, replace, streams)
    total = pos.shape[0]
    nbrs = np.empty(total, dtype=np.int64)
    eids = np.empty(total, dtype=np.int64)
    got = out[:total] if gather and out.shape[0] >= total else \
        np.empty(total if gather else 0, dtype=np.int64)
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min  # of every slot's neighbours
    vlo, vhi = lo, hi  # ... and values (a slot is named only when one is out of range)
    n = seeds.shape[0]
    for i in range(n):
        if i + _SEEDS_AHEAD < n:  # the edges of a seed a few ahead
            ahead = slot[i + _SEEDS_AHEAD]
            ind, isz = arrays[ahead, _INDICES], arrays[ahead, _INDICES_BYTES]
            val, vsz = arrays[ahead, _VALUES], arrays[ahead, _VALUES_BYTES]
            first = start[i + _SEEDS_AHEAD]
            for j in range(first, first + counts[i + _SEEDS_AHEAD]):
                _prefetch_at(ind + isz * pos[j])
                if gather:
                    _prefetch_at(val + vsz * pos[j])
        s = slot[i]
        ind, iwide = arrays[s, _INDICES], arrays[s, _INDICES_BYTES] == 8
        val, vwide = arrays[s, _VALUES], arrays[s, _VALUES_BYTES] == 8
        off = arrays[s, _EDGE_OFFSET]
        for j in range(start[i], start[i] + counts[i]):
            p = pos[j]
            v = _load(ind, p, iwide)
            nbrs[j] = v
            eids[j] = p + off
            lo, hi = min(lo, v), max(hi, v)
            if gather:
                w = _load(val, p, vwide)
                got[j] = w
                vlo, vhi = min(vlo, w), max(vhi, w)
    return counts, nbrs, eids, got, np.array([lo, hi, vlo, vhi]), per_slot, 0


@dataclass
class Reader:
    """One partition read here for an edge type: its CSC, edge offset, the original ids
    of its edges and the file its edges came from (for errors)."""
    part: int
    indptr: Tensor
    indices: Tensor
    edge_offset: int
    values: Optional[Tensor]
    file: str


class JointTables:
    """The arrays of one edge type's partitions read here, as the kernel takes them, each
    checked once: :attr:`arrays` holds per slot (partition) the data addresses of its
    CSC and of its edges' values, their element sizes, its number of destination rows
    and its edge offset. The kernel reads through those addresses at positions the
    checked ``indptr`` bounds (every one lies in its array, as
    :func:`~pyg_dist.sampler._sample_kernels.sample_one_hop` guarantees for one
    partition); the tensors are kept here, so the addresses stay valid.

    Args:
        readers: the partitions, in slot order.
        offsets: the destination node type's id range of every partition (its book's).
        num_edges: the edge type's number of edges (global edge ids lie below it).
        num_parts: partitions of the job.
    """

    def __init__(self, readers: Sequence[Reader], offsets: Tensor, num_edges: int,
                 num_parts: int) -> None:
        self.readers = list(readers)
        self.offsets = offsets.detach().to(torch.int64).contiguous().numpy()
        self.slot_of = np.full(num_parts, -1, dtype=np.int64)
        self.has_values = all(r.values is not None for r in self.readers)
        self.arrays = np.zeros((len(self.readers), 7), dtype=np.int64)
        self._keep: List[Tensor] = []
        for s, r in enumerate(self.readers):
            check_csc(r.indptr, r.indices)
            if self.has_values:
                check_edge_values(r.values, r.indices.numel())
            rows = int(self.offsets[r.part + 1] - self.offsets[r.part])
            if r.indptr.numel() < rows + 1:
                raise PartitionFormatError(f"{r.file}: the CSC has {r.indptr.numel() - 1} "
                                           f"destination rows, the partition owns {rows}")
            if not 0 <= r.edge_offset <= r.edge_offset + int(r.indptr[-1]) <= num_edges:
                raise PartitionFormatError(
                    f"{r.file}: edges from {r.edge_offset} to "
                    f"{r.edge_offset + int(r.indptr[-1])} lie outside the {num_edges} "
                    f"edges of the edge type")
            self.slot_of[r.part] = s
            indptr, indices = r.indptr.contiguous(), r.indices.contiguous()
            values = r.values.contiguous() if self.has_values else None
            self._keep += [indptr, indices] + ([values] if values is not None else [])
            self.arrays[s, _INDPTR] = indptr.data_ptr()
            self.arrays[s, _INDICES] = indices.data_ptr()
            self.arrays[s, _INDICES_BYTES] = indices.element_size()
            if values is not None:
                self.arrays[s, _VALUES] = values.data_ptr()
                self.arrays[s, _VALUES_BYTES] = values.element_size()
            self.arrays[s, _ROWS] = rows
            self.arrays[s, _EDGE_OFFSET] = r.edge_offset
        self.parts = np.array([r.part for r in self.readers], dtype=np.int64)


def stream_seeds(rng_seed: int, parts: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Each slot's stream seed for the next edge type of a hop: partition ``p``'s request
    seeds its ``i``-th edge type ``rng_seed + PART_STRIDE * p + i``, where ``i`` counts
    the hop's earlier edge types that had seeds owned by ``p`` (``used[p]``)."""
    return np.array([(rng_seed + PART_STRIDE * int(p) + int(used[p])) & 0xFFFFFFFFFFFFFFFF
                     for p in parts], dtype=np.uint64)


def _blame(tables: JointTables, keys: np.ndarray, counts: np.ndarray, nbrs: np.ndarray,
           values: np.ndarray, num_src: int, num_edges: int, edge_type: EdgeType) -> None:
    """Raises naming the file of the first edge whose source or original id is out of
    range (the kernel saw one: a damaged partition)."""
    bad = (nbrs < 0) | (nbrs >= num_src)
    if tables.has_values:
        bad |= (values < 0) | (values >= num_edges)
    j = int(np.argmax(bad))
    i = int(np.searchsorted(np.cumsum(counts), j, side="right"))  # the edge's seed
    owner = int(np.searchsorted(tables.offsets, keys[i], side="right")) - 1
    raise PartitionFormatError(
        f"{tables.readers[int(tables.slot_of[owner])].file}: edges {edge_key(edge_type)!r} "
        f"hold source id {int(nbrs[j])} (ids lie in [0, {num_src})) or original id "
        f"{int(values[j]) if tables.has_values else 'n/a'} (in [0, {num_edges})): the "
        f"file is damaged")


def sample_joint(tables: JointTables, seeds: Tensor, fanout: int, replace: bool,
                 streams: np.ndarray, num_src: int, num_edges: int, edge_type: EdgeType,
                 values_out: Optional[Tensor] = None):
    """Draws the in-neighbours of ``seeds`` (global ids, each owned by a partition of
    ``tables``). Returns ``(counts, nbrs, eids, values, slots)``: per seed the number
    drawn, the sources and global edge ids in frontier order, the edges' original ids
    (``None`` without values; into the front of ``values_out`` when it is long enough)
    and which slots owned some seed.

    Raises:
        ValueError: a seed no partition read here owns (the caller's mistake).
        PartitionFormatError: a partition's files hold a source id or an original edge
            id out of range (named by its file).
    """
    keys = seeds.detach().contiguous().numpy().astype(np.int64, copy=False)
    out = np.empty(0, dtype=np.int64)
    if values_out is not None and tables.has_values:
        check_values_out(values_out)
        out = values_out.numpy()
    counts, nbrs, eids, got, bounds, per_slot, status = _joint_uniform(
        tables.arrays, tables.offsets, tables.slot_of, keys, int(fanout), bool(replace),
        streams, tables.has_values, out)
    if status < 0:
        bad = int(keys[-status - 1])
        raise ValueError(f"{edge_key(edge_type)}: seed {bad} is owned by no partition read "
                         f"here (partitions {tables.parts.tolist()})")
    lo, hi, vlo, vhi = (int(v) for v in bounds)
    if nbrs.size and (lo < 0 or hi >= num_src or
                      (tables.has_values and (vlo < 0 or vhi >= num_edges))):
        _blame(tables, keys, counts, nbrs, got, num_src, num_edges, edge_type)
    return (torch.from_numpy(counts), torch.from_numpy(nbrs), torch.from_numpy(eids),
            torch.from_numpy(got) if tables.has_values else None, per_slot > 0)


class JointHops:
    """Runs a sampler's hops jointly when it can (:meth:`of`): every partition of the
    job is read in this process and the hops draw uniformly.

    Args:
        sampler: a bound :class:`~pyg_dist.sampler.DistNeighborSampler`.
        parts: the partitions read here (this process's own first, then the direct ones).
    """

    def __init__(self, sampler, parts: List[int]) -> None:
        self.sampler = sampler
        self.parts = parts
        self._tables: Dict[EdgeType, JointTables] = {}

    @classmethod
    def of(cls, sampler) -> Optional["JointHops"]:
        """The joint runner of ``sampler``, or ``None`` where its hops cannot run jointly
        (weighted, temporal or LABOR sampling; a partition only a peer reads; one
        partition, whose hops are one piece already)."""
        c, group = sampler.config, sampler.group
        if c.is_labor or c.weight_attr is not None or c.time_attr is not None or \
                group.num_parts < 2:
            return None
        reads = direct.of(group)
        parts = [group.part] + [p for p in reads.parts if p != group.part]
        if sorted(parts) != list(range(group.num_parts)):
            return None
        return cls(sampler, parts)

    def _sampler_of(self, part: int):
        s = self.sampler
        return s.local if part == s.group.part else direct.of(s.group).sampler(part)

    def tables(self, edge_type: EdgeType) -> JointTables:
        """The edge type's tables (built and checked on first use)."""
        if edge_type not in self._tables:
            s = self.sampler
            readers = []
            for part in self.parts:
                local = self._sampler_of(part)
                csc = local.graph.csc_by_type[edge_type]
                values = local.ids.table("edge", edge_type) if s.original_ids else None
                readers.append(Reader(part, csc.indptr, csc.indices, int(csc.edge_offset),
                                      values, str(local.graph.graph_file)))
            book = s.graph.node_book(edge_type[2])
            tables = JointTables(readers, torch.as_tensor(book.offsets, dtype=torch.long),
                                 int(s.meta.num_edges[edge_type]), s.group.num_parts)
            self._tables[edge_type] = tables
        return self._tables[edge_type]

    def run(self, state: HopState, hop: int, rng_seed: int, laps) -> None:
        """Samples hop ``hop`` of ``state``'s frontier and adds its edges (``laps``: the
        batch's stage clock, given ``"sample"`` then ``"dedupe"``)."""
        s, c = self.sampler, self.sampler.config
        todo = [(t, state.frontier[t[2]], c.num_neighbors[t][hop])
                for t in s.meta.edge_types
                if c.num_neighbors[t][hop] != 0 and t[2] in state.frontier]
        request = HopRequest([t for t, _, _ in todo], [f.ids for _, f, _ in todo],
                             [k for _, _, k in todo], [None] * len(todo), c.replace,
                             c.temporal_strategy, None, None, rng_seed,
                             original_eids=s.original_ids)
        spares = state.spares(request)
        used = np.zeros(s.group.num_parts, dtype=np.int64)
        start, drawn = timing.now_ns(), []
        for i, (t, front, fanout) in enumerate(todo):
            tables = self.tables(t)
            counts, nbrs, eids, values, had = sample_joint(
                tables, front.ids, fanout, c.replace, stream_seeds(rng_seed, tables.parts, used),
                int(s.meta.num_nodes[t[0]]), int(s.meta.num_edges[t]), t,
                spares[i] if spares else None)
            used[tables.parts[had]] += 1
            drawn.append((counts, nbrs, eids, values))
        timing.lap(timing.current(), "kernel", start)
        direct.of(s.group).calls += len(self.parts) - 1
        laps("sample")
        if state.original is not None:
            state.drew(request, HopResponse([], [], [], [d[3] for d in drawn]))
        sampled = {t: 0 for t in s.meta.edge_types}
        for (t, front, _), (counts, nbrs, eids, values) in zip(todo, drawn):
            batch = None if front.batch is None else torch.repeat_interleave(
                front.batch, counts, output_size=nbrs.numel())
            sampled[t] = state.add_hop_edges(t, [EdgePiece(
                col=None, nbrs=nbrs, eids=eids, batch=batch, original=values,
                seeds=front.local, counts=counts)])
        state.end_hop(sampled)
        laps("dedupe")
