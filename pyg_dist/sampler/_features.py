"""Fetching node and edge attributes by global id from every partition.

Requests to remote partitions go out first, all in flight at once: one request per
partition carries every node and edge type, split into several requests when the
response would exceed ``max_rpc_bytes`` (bounded buffers are reused by the
allocator instead of being faulted in afresh on both sides, and the sender gathers
the next piece while the previous one is on the wire). Meanwhile the rows of this
process's partition and of partitions read directly on this machine
(:mod:`pyg_dist.sampler._direct`) are gathered straight into the output, and every
response is copied once, into its rows of the output. Deduplication (``unique=True``)
is a hash map, O(ids).

Every response is checked against its request and the local schema before a row is
copied (:func:`~pyg_dist.sampler._checks.check_feature_response`): a peer that sends
rows of another width, dtype or count gets a
:class:`~pyg_dist.sampler._checks.RemoteResponseError` naming it,
and the row-copy kernel itself refuses any copy that would leave its tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist.format._book import RangeBook
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc._routing import fan_out
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler._buffers import OutputPool
from pyg_dist.sampler._cache.feature_cache import Budget, FeatureCache, choose
from pyg_dist.sampler._checks import (RowLayout, check_direct_rows,
                                    check_feature_response, check_index)
from pyg_dist.sampler._fetch_jobs import (Group, Job, Pending, Share, dedupe, layouts,
                                        owner_shares, cut_share)
from pyg_dist.store._original_ids import ID_ATTR
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.sampler._gather import place, place_cast
from pyg_dist.sampler._packed_rows import packable, unpack
from pyg_dist.sampler._types import FeatureRequest, FeatureResponse
from pyg_dist.sampler._wire import WireSpec, plan
from pyg_dist.sampler import _direct as direct, _timing as timing
from pyg_dist._typing import EdgeType, NodeType


@dataclass
class FetchStats:
    """What came over the network for this fetcher (direct reads excluded)."""
    responses: int = 0
    rows: int = 0
    bytes: int = 0  # attribute bytes received, as sent (in wire types)

    def count(self, response: FeatureResponse) -> None:
        self.responses += 1
        for kind in ("nodes", "edges"):
            for attrs in getattr(response, kind).values():
                for i, t in enumerate(attrs.values()):
                    self.rows += t.size(0) if i == 0 else 0
                    self.bytes += t.numel() * t.element_size()

    def reset(self) -> "FetchStats":
        """Returns the counts so far and starts new ones."""
        out = FetchStats(self.responses, self.rows, self.bytes)
        self.responses = self.rows = self.bytes = 0
        return out


class FeatureFetcher:
    """Reads attributes of arbitrary global ids, wherever they live.

    Args:
        group (RpcGroup): the RPC group (routes partitions to peers).
        local (LocalSampler): this process's partition (gathers own rows).
        meta (PartitionMeta): attribute names and partition books.
        node_attrs: attributes to read per node type (default: all the partition stores
            and all ``put`` into the local store before; every rank must have them).
        edge_attrs: attributes to read per edge type (default: likewise).
        max_rpc_bytes (int): response size above which a request to one partition is
            split into several (all in flight at once).
        wire_dtype: float32 attributes that peers send as bfloat16/float16 (see
            :mod:`pyg_dist.sampler._wire`; default: none).
        original_ids (bool): also read every node's original id from its owner, as one
            more column of its rows (:data:`~pyg_dist.store._original_ids.ID_ATTR`), for every
            node type: no extra round trip. (Sampled edges' original ids come with the
            hop that sampled them: ``SampledSubgraph.original_edge``.)
    """

    def __init__(self, group: RpcGroup, local: LocalSampler, meta: PartitionMeta,
                 node_attrs: Optional[Dict[NodeType, List[str]]] = None,
                 edge_attrs: Optional[Dict[EdgeType, List[str]]] = None,
                 max_rpc_bytes: int = 8 << 20, wire_dtype: WireSpec = None,
                 original_ids: bool = False) -> None:
        self.group = group
        self.direct = direct.of(group)  # partitions read from their files here
        self.local = local
        self.meta = meta
        # default: what the partition stores, and what was put into the store since
        stored = local.features
        self.node_attrs = node_attrs if node_attrs is not None else {
            t: sorted(set(meta.node_attrs.get(t, {})) | set(stored.attr_names(t)))
            for t in meta.node_types}
        self.edge_attrs = edge_attrs if edge_attrs is not None else {
            t: sorted(set(meta.edge_attrs.get(t, {})) | set(stored.attr_names(t)))
            for t in meta.edge_types}
        if original_ids:
            for t in list(self.node_attrs):
                self.node_attrs[t] = [a for a in self.node_attrs[t] if a != ID_ATTR] + [ID_ATTR]
        self.max_rpc_bytes = max(int(max_rpc_bytes), 1)
        self._books: Dict[Group, RangeBook] = {t: meta.node_book(t) for t in meta.node_types}
        self._books.update({t: meta.edge_book(t) for t in meta.edge_types})
        self.cache: Optional[FeatureCache] = None  # see build_cache()
        self.wire = plan(wire_dtype, self.node_attrs, self.edge_attrs, self._attr_layout)
        self.stats = FetchStats()
        #: output buffers reused once the batch they went out in is gone
        self.outputs = OutputPool()

    def build_cache(self, budget: Budget, skip_parts: Tuple[int, ...] = ()) -> Optional[FeatureCache]:
        """Fills :attr:`cache` with the most referenced remote node rows within
        ``budget`` (see :mod:`pyg_dist.sampler._cache.feature_cache`); ``0``/``None`` disables it."""
        self.cache = None
        chosen, row_bytes = self.cache_plan(budget, skip_parts)
        if chosen:
            self.cache = self.fetch_cache(chosen, row_bytes)
        return self.cache

    def cache_plan(self, budget: Budget, skip_parts: Tuple[int, ...] = ()
                   ) -> Tuple[Dict[NodeType, Tensor], Dict[NodeType, int]]:
        """The remote node ids a cache of ``budget`` holds (sorted, per node type; empty:
        no cache) and the bytes of one row of each type."""
        row_bytes = {t: self._bytes_per_row("nodes", t, attrs)
                     for t, attrs in self.node_attrs.items() if attrs}
        chosen = choose(self.local.graph, row_bytes, budget, skip_parts)
        if not any(ids.numel() for ids in chosen.values()):
            return {}, {}
        return chosen, {t: row_bytes[t] for t in chosen}

    def fetch_cache(self, chosen: Dict[NodeType, Tensor],
                    row_bytes: Dict[NodeType, int]) -> FeatureCache:
        """A cache of the rows of ``chosen``, fetched exactly as stored (never in the
        wire type)."""
        fetched = self.group.loop.run(self.fetch(chosen, {}, unique=False, wire=False))
        return FeatureCache(chosen, fetched.nodes, row_bytes)

    def node_layout(self, node_type: NodeType, attr: str) -> Tuple[Tuple[int, ...], torch.dtype]:
        """Per-row shape and dtype of a node attribute."""
        return self._attr_layout("nodes", node_type, attr)

    async def fetch(self, nodes: Dict[NodeType, Tensor], edges: Dict[EdgeType, Tensor],
                    unique: bool = True, wire: bool = True,
                    every_type: bool = False) -> FeatureResponse:
        """Attributes of ``nodes``/``edges`` (global ids), rows in the given order.

        Args:
            unique: deduplicate ids before fetching (needed when ids may repeat).
            wire: let peers send the attributes of ``wire_dtype`` in that type (``False``:
                every row exactly as stored).
            every_type: also answer, with zero rows, the types not asked (as PyG's
                loaders give every attribute of a type nothing was sampled of).
        """
        clock = timing.FetchClock()
        if every_type:
            none = torch.empty(0, dtype=torch.long)
            nodes = {**{t: none for t in self.node_attrs}, **nodes}
            edges = {**{t: none for t in self.edge_attrs}, **edges}
        jobs = [self._job("nodes", t, ids, unique) for t, ids in nodes.items()
                if self.node_attrs.get(t)]
        jobs += [self._job("edges", t, ids, unique) for t, ids in edges.items()
                 if self.edge_attrs.get(t)]
        pending = self._send(jobs, wire)  # remote first, then local rows while they fly
        expected: Dict[bool, Dict[Tuple[str, Group, str], RowLayout]] = {}

        def local() -> None:
            for job in jobs:
                self._fetch_here(job, clock.times)
            expected[False] = layouts(jobs)
            expected[True] = self._wired(expected[False])  # as sent in a wire type
            clock.remote()

        def arrived(sent: Pending, response: FeatureResponse) -> None:
            check_feature_response(sent.request, response, expected[sent.wired],
                                   self.group.describe(sent.rank))
            for job, share in sent.pieces:
                got = getattr(response, job.kind)[job.group]
                for attr in job.attrs:
                    place_cast(job.out[attr], share.rows, got[attr])
                timing.count_rows(clock.times, "remote", share.ids.numel(), sum(
                    got[a].numel() * got[a].element_size() for a in job.attrs))
            self.stats.count(response)

        await fan_out([(p, p.future) for p in pending], local, arrived)
        clock.replies_in()
        result = self._result(jobs)
        clock.finish()
        return result

    def _fetch_here(self, job: Job, times: Optional[timing.BatchTimes]) -> None:
        """Allocates ``job``'s outputs and fills the rows read in this process: its own
        partition's, those of partitions read directly, and the feature cache's."""
        self._allocate(job)
        for share in job.shares:
            if share.part == self.group.part or share.part in self.direct:
                self._gather_here(job, share, times)
        if job.cached is not None and self.cache is not None:
            for attr in job.attrs:
                place(job.out[attr], job.cached[0], self.cache.rows[job.group][attr],
                      job.cached[1])
            n = job.cached[0].numel()
            timing.count_rows(times, "cached", n, n * self._row_bytes(job))

    def _wired(self, expected: Dict[Tuple[str, Group, str], RowLayout]
               ) -> Dict[Tuple[str, Group, str], RowLayout]:
        """``expected`` with the attributes peers send in a wire type in that type."""
        wired = dict(expected)
        for (kind, group), attrs in self.wire.items():
            for attr, name in attrs.items():
                if (kind, group, attr) in wired:
                    shape = wired[(kind, group, attr)].shape
                    wired[(kind, group, attr)] = RowLayout(shape, getattr(torch, name))
        return wired

    def _job(self, kind: str, group: Group, ids: Tensor, unique: bool) -> Job:
        book = self._books[group]
        ids = torch.as_tensor(ids).long()
        book.check(ids)
        inverse = None
        if unique:
            ids, inverse = dedupe(ids)
        attrs = list((self.node_attrs if kind == "nodes" else self.edge_attrs)[group])
        cache = self.cache
        if kind != "nodes" or cache is None or not cache.covers(group, attrs):
            return Job(kind, group, attrs, owner_shares(ids, book), ids.numel(), inverse)
        hit_rows, cache_rows = cache.lookup(group, ids)
        miss = torch.ones(ids.numel(), dtype=torch.bool)
        miss[hit_rows] = False
        miss_rows = torch.nonzero(miss).view(-1)
        shares = [Share(s.part, s.ids, miss_rows[s.rows[0]:s.rows[1]] if isinstance(s.rows, tuple)
                         else miss_rows[s.rows]) for s in owner_shares(ids[miss_rows], book)]
        remote = sum(s.ids.numel() for s in shares if s.part != self.group.part)
        cache.count(group, hit_rows.numel(), remote)
        return Job(kind, group, attrs, shares, ids.numel(), inverse,
                    cached=(hit_rows, cache_rows) if hit_rows.numel() else None)

    def _layout(self, job: Job, attr: str) -> Tuple[Tuple[int, ...], torch.dtype]:
        return self._attr_layout(job.kind, job.group, attr)

    def _attr_layout(self, kind: str, group: Group, attr: str
                     ) -> Tuple[Tuple[int, ...], torch.dtype]:
        """Per-row shape and dtype of an attribute (as stored here, else as in META)."""
        if attr == ID_ATTR:
            return (), torch.int64
        store = self.local.features
        if store.has(group, attr):
            t = store.tensor(group, attr)
            return tuple(t.shape[1:]), t.dtype
        specs = self.meta.node_attrs if kind == "nodes" else self.meta.edge_attrs
        spec = specs[group][attr]
        return tuple(spec.shape), getattr(torch, spec.dtype)

    def _bytes_per_row(self, kind: str, group: Group, attrs: List[str]) -> int:
        total = 0
        for attr in attrs:
            shape, dtype = self._attr_layout(kind, group, attr)
            total += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return max(total, 1)

    def _row_bytes(self, job: Job) -> int:
        return self._bytes_per_row(job.kind, job.group, job.attrs)

    def _allocate(self, job: Job) -> None:
        for attr in job.attrs:
            shape, dtype = self._layout(job, attr)
            job.out[attr] = self.outputs.empty((job.kind, job.group, attr), job.num_rows,
                                               shape, dtype)

    def _gather_here(self, job: Job, share: Share,
                     times: Optional[timing.BatchTimes] = None) -> None:
        """Rows of this process's partition, or of one read directly on this machine
        (what its owner would send, from this process's mapping of the same files),
        copied straight into the output: no response in between (counted in ``times``)."""
        start = timing.now_ns()
        own = share.part == self.group.part
        sampler = self.local if own else self.direct.sampler(share.part)
        rows = share.ids - self._books[job.group].start(share.part)  # owned: split by book
        columns = {attr: sampler.column(job.group, attr) for attr in job.attrs}
        below = min(c.size(0) for c in columns.values())
        check_index(rows, below, f"rows of partition {share.part}")  # once for every column
        if not own:
            self.direct.calls += 1  # one read of a direct partition
        for attr, column in columns.items():
            if not own:
                check_direct_rows(column, job.out[attr],
                                  self.group.describe(self.group.route(share.part)),
                                  job.group, attr, ids=attr == ID_ATTR)
        narrow = packable(columns, job.out)
        if narrow:  # one pass over the rows for every one-value column
            packed = sampler.packed(job.group, {a: columns[a] for a in narrow})
            records = self.outputs.empty(("packed", job.kind, job.group), rows.numel(),
                                         packed.table.shape[1:], torch.uint8)
            place(records, (0, rows.numel()), packed.table, rows, src_rows_below=below)
            unpack(records, packed, job.out, share.rows)
        for attr, column in columns.items():
            if attr not in narrow:
                place(job.out[attr], share.rows, column, rows, src_rows_below=below)
        source = "own" if own else "direct"
        timing.lap(times, f"fetch_{source}", start)
        timing.count_rows(times, source, rows.numel(), rows.numel() * self._row_bytes(job))

    def _send(self, jobs: List[Job], wire: bool = True) -> List[Pending]:
        """Issues every remote request; returns them with their futures."""
        pending = []
        for part, pieces in self._pack(jobs).items():
            wired = wire and bool(self.wire)
            for batch in pieces:
                req = FeatureRequest()
                for job, share in batch:
                    prefix = job.kind[:-1]
                    getattr(req, job.kind)[job.group] = share.ids
                    getattr(req, f"{prefix}_attrs")[job.group] = job.attrs
                    cast = self.wire.get((job.kind, job.group)) if wired else None
                    if cast:
                        getattr(req, f"{prefix}_wire")[job.group] = dict(cast)
                rank = self.group.route(part)
                fut = self.group.call_async(rank, "sampler.features", req)
                pending.append(Pending(rank, req, batch, fut, wired))
        return pending

    def _pack(self, jobs: List[Job]) -> Dict[int, List[List[Tuple[Job, Share]]]]:
        """Pieces of remote partitions (not read here), packed into requests of bounded
        response size (each type at most once per request)."""
        packed: Dict[int, List[List[Tuple[Job, Share]]]] = {}
        used: Dict[int, int] = {}
        for job in jobs:
            row_bytes = self._row_bytes(job)
            per_piece = max(self.max_rpc_bytes // row_bytes, 1)
            for share in job.shares:
                if share.part == self.group.part or share.part in self.direct:
                    continue
                for piece in cut_share(share, per_piece):
                    size = piece.ids.numel() * row_bytes
                    reqs = packed.setdefault(piece.part, [[]])
                    if reqs[-1] and (used[piece.part] + size > self.max_rpc_bytes
                                     or any(j is job for j, _ in reqs[-1])):
                        reqs.append([])
                        used[piece.part] = 0
                    reqs[-1].append((job, piece))
                    used[piece.part] = used.get(piece.part, 0) + size
        return packed

    def _result(self, jobs: List[Job]) -> FeatureResponse:
        out = FeatureResponse()
        for job in jobs:
            values = job.out
            if job.inverse is not None:
                values = {a: v.index_select(0, job.inverse) for a, v in values.items()}
            getattr(out, job.kind)[job.group] = values
        return out
