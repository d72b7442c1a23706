"""``LocalSampler``: one-hop sampling on the partition this process holds.

Used for the seeds this process owns and, as the RPC callee ``sampler.hop``, for
the seeds peers send here. Per-edge time and weight arrays are derived once and
cached.
"""
from __future__ import annotations

import threading
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.format._schema import PartitionFormatError
from pyg_dist.rpc import callee, served
from pyg_dist.store._original_ids import ID_ATTR
from pyg_dist.store._original_ids import PartIds
from pyg_dist.sampler._sample_kernels import SampledHop, sample_one_hop
from pyg_dist.sampler._labor import sample_labor_hop, source_keys, type_seed
from pyg_dist.sampler._packed_rows import Packed, PackedColumns
from pyg_dist.sampler._types import FeatureRequest, FeatureResponse, HopRequest, HopResponse
from pyg_dist.sampler._wire import to_wire
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist._typing import EdgeType, NodeType, edge_key


class LocalSampler:
    """Samples in-edges of owned nodes of one partition.

    Args:
        graph (LocalGraphStore): the partition's edges.
        features (LocalFeatureStore): its attributes (edge weights, node/edge time).
    """

    def __init__(self, graph: LocalGraphStore, features: LocalFeatureStore) -> None:
        self.graph = graph
        self.features = features
        self._cache: Dict[Tuple[str, EdgeType, str], Tensor] = {}
        self._lock = threading.Lock()
        self._ids: Optional[PartIds] = None
        self._packed = PackedColumns()

    @property
    def ids(self) -> PartIds:
        """The original ids of this partition's nodes and edges (mapped on first use)."""
        if self._ids is None:
            self._ids = PartIds.of_stores(self.features, self.graph)
        return self._ids

    def column(self, group: Union[NodeType, EdgeType], attr: str) -> Tensor:
        """All owned rows of an attribute; :data:`~pyg_dist.store._original_ids.ID_ATTR` is the
        original ids of the owned nodes or edges."""
        if attr == ID_ATTR:
            return self.ids.table("edge" if isinstance(group, tuple) else "node", group)
        return self.features.tensor(group, attr)

    def packed(self, group: Union[NodeType, EdgeType], columns: Dict[str, Tensor]) -> Packed:
        """``columns`` (of :meth:`column`; one value per row) packed row by row
        (:mod:`pyg_dist.sampler._packed_rows`), kept for the next batches."""
        return self._packed.get((group, tuple(columns)), columns)

    def rows(self, group: Union[NodeType, EdgeType], ids: Tensor) -> Tensor:
        """Row positions of owned global ``ids`` (raises for ids of other partitions)."""
        ids = torch.as_tensor(ids)
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
        book = self.graph.edge_book(group) if isinstance(group, tuple) else \
            self.graph.node_book(group)
        return book.to_local(self.graph.part, ids.long())

    def gather_rows(self, group: Union[NodeType, EdgeType], attr: str, rows: Tensor) -> Tensor:
        """Rows ``rows`` (from :meth:`rows`) of an attribute; original ids as int64."""
        out = self.column(group, attr).index_select(0, rows)
        return out.long() if attr == ID_ATTR else out

    def hop(self, request: HopRequest,
            values_out: Optional[List[Optional[Tensor]]] = None) -> HopResponse:
        """Runs one hop for every edge type of the request (from a peer: checked);
        ``values_out`` (this process's own hops): per edge type, a buffer the edges'
        original ids may be drawn into (:func:`~pyg_dist.sampler._sample_kernels.sample_one_hop`)."""
        n = len(request.edge_types)
        if not len(request.seeds) == len(request.fanouts) == len(request.seed_time) == n:
            raise ValueError(f"malformed hop request: {n} edge types, {len(request.seeds)} "
                             f"seed lists, {len(request.fanouts)} fan-outs and "
                             f"{len(request.seed_time)} seed time lists")
        out = HopResponse([], [], [])
        for i, edge_type in enumerate(request.edge_types):
            if request.labor_seed is not None:
                hop = self.sample_labor(edge_type, request.seeds[i], request.fanouts[i],
                                        request.labor_seed, request.weight_attr,
                                        request.original_eids,
                                        values_out[i] if values_out else None)
            else:
                hop = self.sample(edge_type, request.seeds[i], request.fanouts[i],
                                  request.replace, request.rng_seed + i,
                                  request.seed_time[i], request.time_attr,
                                  request.temporal_strategy, request.weight_attr,
                                  original_eids=request.original_eids,
                                  values_out=values_out[i] if values_out else None)
            out.counts.append(hop.counts), out.nbrs.append(hop.nbrs), out.eids.append(hop.pos)
            if request.original_eids:
                out.original_eids.append(hop.values)
        return out

    def sample(self, edge_type: EdgeType, seeds: Tensor, fanout: int, replace: bool,
               rng_seed: int, seed_time: Optional[Tensor] = None,
               time_attr: Optional[str] = None, strategy: str = "uniform",
               weight_attr: Optional[str] = None, original_eids: bool = False,
               values_out: Optional[Tensor] = None) -> SampledHop:
        """Neighbours of owned global ``seeds`` over ``edge_type``.

        Returns:
            :class:`~pyg_dist.sampler._sample_kernels.SampledHop` with ``pos`` the global ids
            of the sampled edges and, with ``original_eids``, ``values`` their original
            ids (read at their CSC positions in the mapped ``edge_ids.pt`` as they are
            drawn).
        """
        csc = self.graph.csc_by_type[edge_type]
        local = self.graph.node_book(edge_type[2]).to_local(self.graph.part, seeds)
        weights = self.edge_weight(edge_type, weight_attr) if weight_attr else None
        edge_time = self.edge_time(edge_type, time_attr) if time_attr else None
        if edge_time is None:
            seed_time = None
        hop = sample_one_hop(
            csc.indptr, csc.indices, local, fanout, replace, rng_seed, weights=weights,
            edge_time=edge_time, seed_time=seed_time, temporal_strategy=strategy,
            edge_values=self.ids.table("edge", edge_type) if original_eids else None,
            values_out=values_out, edge_offset=csc.edge_offset)
        self._check_sources(edge_type, hop.nbrs)
        return hop

    def sample_labor(self, edge_type: EdgeType, seeds: Tensor, fanout: int, labor_seed: int,
                     weight_attr: Optional[str] = None, original_eids: bool = False,
                     values_out: Optional[Tensor] = None) -> SampledHop:
        """LABOR-samples neighbours of owned global ``seeds`` over ``edge_type``
        (:mod:`pyg_dist.sampler._labor`; ``labor_seed``: the layer's seed); returns as
        :meth:`sample` does (``values_out``: as there)."""
        csc = self.graph.csc_by_type[edge_type]
        local = self.graph.node_book(edge_type[2]).to_local(self.graph.part, seeds)
        weights = self.edge_weight(edge_type, weight_attr) if weight_attr else None
        hop = sample_labor_hop(csc.indptr, csc.indices, self.labor_keys(edge_type), local,
                               fanout, type_seed(labor_seed, edge_type[0]), weights=weights,
                               edge_ids=self.ids.table("edge", edge_type),
                               edge_values=original_eids, values_out=values_out)
        self._check_sources(edge_type, hop.nbrs)
        return hop._replace(pos=hop.pos + csc.edge_offset)

    def labor_keys(self, edge_type: EdgeType) -> Tensor:
        """The original id of every stored edge's source (built on first use, kept)."""
        def build() -> Tensor:
            src = edge_type[0]
            return source_keys(lambda ids: self.ids.tables.to_original("node", src, ids),
                               self.graph.csc_by_type[edge_type].indices,
                               self.graph.meta.num_nodes[src])
        return self._cached("labor_keys", edge_type, "", build)

    def _check_sources(self, edge_type: EdgeType, ids: Tensor) -> None:
        """Source ids read from ``graph.pt`` are in range (a mapped store's ids are not
        all checked at open; this costs one pass over what was sampled)."""
        if ids.numel() == 0:
            return
        lo, hi = (int(v) for v in torch.aminmax(ids))
        total = self.graph.meta.num_nodes[edge_type[0]]
        if lo < 0 or hi >= total:
            raise PartitionFormatError(
                f"{self.graph.graph_file}: csc[{edge_key(edge_type)!r}] indices hold source "
                f"id {lo if lo < 0 else hi}, outside [0, {total}): the file is damaged")

    def edge_weight(self, edge_type: EdgeType, attr: str) -> Optional[Tensor]:
        """Sampling weights of the stored edges (float64, CSC order); ``None`` when the
        edge type has no such attribute (its edges are drawn uniformly)."""
        if not self.features.has(edge_type, attr):
            return None

        def build() -> Tensor:
            w = self.features.tensor(edge_type, attr).to(torch.float64).view(-1)
            if w.numel() and not bool((w >= 0).all()):
                raise ValueError(f"edge weights '{attr}' of {edge_key(edge_type)} must be "
                                 f"non-negative numbers")
            return w
        return self._cached("weight", edge_type, attr, build)

    def edge_time(self, edge_type: EdgeType, attr: str) -> Optional[Tensor]:
        """Time of every stored edge (int64, CSC order): the edge's own time if ``attr``
        is an edge attribute, else the time of its source node; ``None`` when neither
        exists (no time filter on this edge type, as in PyG)."""
        if not self.features.has(edge_type, attr) and \
                attr not in self.graph.meta.node_attrs.get(edge_type[0], {}):
            return None

        def build() -> Tensor:
            if self.features.has(edge_type, attr):
                return self.features.tensor(edge_type, attr).long().view(-1)
            return self._source_time(edge_type, attr)
        return self._cached("time", edge_type, attr, build)

    def _source_time(self, edge_type: EdgeType, attr: str) -> Tensor:
        src_type = edge_type[0]
        if not self.features.has(src_type, attr):
            raise KeyError(f"time_attr '{attr}' is neither an edge attribute of "
                           f"{edge_key(edge_type)} nor a node attribute of '{src_type}'")
        src = self.graph.csc_by_type[edge_type].indices
        book = self.graph.node_book(src_type)
        owned = book.owns(self.graph.part, src)
        out = torch.empty(src.numel(), dtype=torch.long)
        own_time = self.features.tensor(src_type, attr).long().view(-1)
        out[owned] = own_time[src[owned] - book.start(self.graph.part)]
        halo_ids = self.graph.halo.get(src_type, torch.empty(0, dtype=torch.long))
        halo_time = self.graph.halo_attrs.get(src_type, {}).get(attr)
        if halo_time is None and not bool(owned.all()):
            raise KeyError(f"partition has no halo values of node attribute '{attr}' of "
                           f"'{src_type}': re-partition with halo_attrs=('{attr}',)")
        if halo_time is not None:
            outside = src[~owned].long()
            pos = torch.searchsorted(halo_ids, outside).clamp_(max=max(halo_ids.numel() - 1, 0))
            if outside.numel() and (halo_ids.numel() == 0 or
                                    not bool((halo_ids[pos] == outside).all())):
                raise PartitionFormatError(
                    f"{self.graph.graph_file}: halo ids of node type '{src_type}' miss sources "
                    f"of edge type {edge_key(edge_type)} owned by other partitions")
            out[~owned] = halo_time.long().view(-1)[pos]
        return out

    def _cached(self, kind: str, edge_type: EdgeType, attr: str, build) -> Tensor:
        key = (kind, edge_type, attr)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]

    def features_of(self, request: FeatureRequest) -> FeatureResponse:
        """Attributes of owned node and edge ids (the callee ``sampler.features``)."""
        out = FeatureResponse()
        for kind in ("nodes", "edges"):
            attrs, wire = (getattr(request, f"{kind[:-1]}_{x}") for x in ("attrs", "wire"))
            for group, ids in getattr(request, kind).items():
                cast, wanted = wire.get(group, {}), attrs.get(group, [])
                rows = self.rows(group, ids) if wanted else None  # once for every attribute
                getattr(out, kind)[group] = {
                    a: to_wire(self.gather_rows(group, a, rows), cast.get(a)) for a in wanted}
        return out


def serving_objects(features: LocalFeatureStore, graph: LocalGraphStore) -> Dict[str, object]:
    """What a process serving a partition holds for its peers' callees, by name
    (``graph``, ``features`` and the ``sampler`` answering ``sampler.*`` callees)."""
    return {"graph": graph, "features": features, "sampler": LocalSampler(graph, features)}


@callee("sampler.hop", reads_partition_only=True)
def _serve_hop(request: HopRequest) -> HopResponse:
    return served("sampler").hop(request)


@callee("sampler.features", reads_partition_only=True)
def _serve_features(request: FeatureRequest) -> FeatureResponse:
    return served("sampler").features_of(request)
