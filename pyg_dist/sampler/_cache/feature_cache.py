"""A cache of the remote node rows a trainer is most likely to fetch.

Candidates are this partition's halo nodes (sources of its edges owned elsewhere),
ranked by how many of the partition's edges come from them: a hop from owned nodes
draws a halo node with probability growing with that count, so the most referenced
halo nodes are the rows most fetched. The cache holds their node attributes, fetched
once when it is built, within a budget (``feature_cache=``: bytes as an ``int``, or a
``float`` in ``(0, 1]``: that fraction of each node type's halo nodes); ``0`` or
``None`` disables it.

The processes of one machine that serve the same partition share one copy: the first
builds it into a memory-backed file, the others and every sampler worker map it
(:mod:`pyg_dist.sampler._cache.shared`).

Cached rows are exactly the owners' rows: only attributes of partitions whose owner
holds nothing but its partition files are cached (``DistEmbedding`` rows never pass
through here), and a rank that builds a cache seals its own feature store, since its
peers (with the same loader options) cache its rows. Lookups are a binary search of
the sorted cached ids, O(ids log cached).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from pyg_dist._typing import NodeType

Budget = Union[int, float, None]


@dataclass
class CacheStats:
    """Counts since the cache was built (or :meth:`FeatureCache.reset_stats`)."""
    hits: int = 0          # rows served from the cache
    remote_rows: int = 0   # remote rows still fetched over the network
    bytes_saved: int = 0   # bytes of the rows served from the cache

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.remote_rows
        return self.hits / total if total else 0.0


@dataclass
class FeatureCache:
    """Cached remote node rows: per node type, sorted global ids and their attributes."""
    ids: Dict[NodeType, Tensor] = field(default_factory=dict)
    rows: Dict[NodeType, Dict[str, Tensor]] = field(default_factory=dict)
    row_bytes: Dict[NodeType, int] = field(default_factory=dict)
    stats: CacheStats = field(default_factory=CacheStats)
    #: the machine's shared file the rows are mapped from (``None``: private rows)
    file: Optional[Any] = None
    _release: Optional[Callable[[], Any]] = field(default=None, repr=False)

    def close(self) -> None:
        """Lets go of a shared file (the machine's last user removes it); idempotent.
        Rows must not be used afterwards."""
        if self._release is not None:
            self._release()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for attrs in self.rows.values()
                   for t in attrs.values())

    @property
    def num_rows(self) -> int:
        return sum(ids.numel() for ids in self.ids.values())

    def reset_stats(self) -> CacheStats:
        """Returns the counts so far and starts new ones (e.g. once per epoch)."""
        stats, self.stats = self.stats, CacheStats()
        return stats

    def covers(self, node_type: NodeType, attrs: List[str]) -> bool:
        return node_type in self.ids and all(a in self.rows[node_type] for a in attrs)

    def lookup(self, node_type: NodeType, ids: Tensor) -> Tuple[Tensor, Tensor]:
        """``(positions, cache_rows)``: which of ``ids`` are cached, and their rows."""
        cached = self.ids[node_type]
        if cached.numel() == 0 or ids.numel() == 0:
            return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
        pos = torch.searchsorted(cached, ids).clamp_(max=cached.numel() - 1)
        hit = cached[pos] == ids
        return torch.nonzero(hit).view(-1), pos[hit]

    def count(self, node_type: NodeType, hits: int, remote_rows: int) -> None:
        self.stats.hits += hits
        self.stats.remote_rows += remote_rows
        self.stats.bytes_saved += hits * self.row_bytes.get(node_type, 0)


def halo_counts(graph: Any, node_type: NodeType) -> Tuple[Tensor, Tensor]:
    """Halo nodes of ``node_type`` and how many of the partition's edges they source."""
    halo = graph.halo.get(node_type, torch.empty(0, dtype=torch.long))
    counts = torch.zeros(halo.numel(), dtype=torch.long)
    if halo.numel() == 0:
        return halo, counts
    book = graph.node_book(node_type)
    for edge_type, csc in graph.csc_by_type.items():
        if edge_type[0] != node_type:
            continue
        src = csc.indices
        remote = src[~book.owns(graph.part, src)].long()
        if remote.numel():
            pos = torch.searchsorted(halo, remote).clamp_(max=halo.numel() - 1)
            counts += torch.bincount(pos[halo[pos] == remote], minlength=halo.numel())
    return halo, counts


def check_budget(budget: Any) -> None:
    """Raises unless ``budget`` is a ``feature_cache`` value: ``None``, bytes as an
    ``int >= 0``, or a ``float`` fraction in ``[0, 1]`` (``0``: no cache).

    Raises:
        TypeError: naming ``feature_cache``, for another type (a ``bool`` included).
        ValueError: naming ``feature_cache``, for a negative value or a fraction above 1.
    """
    if budget is None:
        return
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise TypeError(f"feature_cache must be a number of bytes (int), a fraction of the "
                        f"halo nodes (float in (0, 1]) or None, got "
                        f"{type(budget).__name__} {budget!r}"[:200])
    if isinstance(budget, float) and not 0 <= budget <= 1:
        raise ValueError(f"feature_cache as a fraction must lie in (0, 1] (0: no cache), "
                         f"got {budget}")
    if budget < 0:
        raise ValueError(f"feature_cache as bytes must be >= 0 (0: no cache), got {budget}")


def choose(graph: Any, row_bytes: Dict[NodeType, int], budget: Budget,
           skip_parts: Tuple[int, ...] = ()) -> Dict[NodeType, Tensor]:
    """Global ids to cache per node type (sorted), most referenced first within the
    budget; ids owned by ``skip_parts`` are never chosen.

    Raises:
        TypeError, ValueError: ``budget`` is not a ``feature_cache`` value
            (:func:`check_budget`).
    """
    check_budget(budget)
    if not budget:
        return {}
    ranked: List[Tuple[NodeType, Tensor, Tensor]] = []
    for node_type in row_bytes:
        halo, counts = halo_counts(graph, node_type)
        keep = counts > 0
        for part in skip_parts:
            keep &= ~graph.node_book(node_type).owns(part, halo)
        halo, counts = halo[keep], counts[keep]
        order = torch.argsort(counts, descending=True, stable=True)
        ranked.append((node_type, halo[order], counts[order]))
    out: Dict[NodeType, Tensor] = {}
    if isinstance(budget, float):
        if not 0 < budget <= 1:
            raise ValueError(f"feature_cache as a fraction must lie in (0, 1], got {budget}")
        for node_type, ids, _ in ranked:
            take = int(round(budget * ids.numel()))
            out[node_type] = torch.sort(ids[:take]).values
        return out
    # bytes: the most referenced rows of any type first
    if not ranked or sum(ids.numel() for _, ids, _ in ranked) == 0:
        return {}
    counts = torch.cat([c for _, _, c in ranked])
    sizes = torch.cat([torch.full((ids.numel(),), row_bytes[t], dtype=torch.long)
                       for t, ids, _ in ranked])
    order = torch.argsort(counts, descending=True, stable=True)
    fits = torch.cumsum(sizes[order], 0) <= int(budget)
    chosen = order[fits]
    at = np.cumsum([0] + [ids.numel() for _, ids, _ in ranked])
    for i, (node_type, ids, _) in enumerate(ranked):
        mine = chosen[(chosen >= at[i]) & (chosen < at[i + 1])] - int(at[i])
        out[node_type] = torch.sort(ids[mine]).values
    return out
