"""Stores built in memory with a partition book set by hand, served as a partition.

``torch_geometric.distributed``'s tests and tutorial build one partition per rank in
memory::

    feature_store = LocalFeatureStore.from_data(node_id, x)    # rows of node_id's nodes
    graph_store = LocalGraphStore.from_data(edge_id, edge_index, num_nodes)
    graph_store.node_pb = owner_of_every_node                   # a dict by node type if hetero
    graph_store.num_partitions, graph_store.partition_idx = world_size, rank

pyg_dist's sampler serves such a pair as it serves a partition opened with
``from_partition``: this module builds the same structures (``PartitionMeta``, CSC in
relabelled ids, halo, id tables, owned rows) in two steps.

1. :func:`plan_partition` (local, no communication) checks the partition book and
   keeps the edges whose destination this partition owns (a node is sampled at its
   owner, so edges a rank holds for another owner are not used there).
2. :func:`build_partition`, once every rank's :meth:`MemoryPlan.info` is known (the
   sampler exchanges them as it joins RPC, collectively), relabels nodes into one
   range per owner (partition ``p``'s nodes in increasing original id order) and edges
   into one range per partition (partition ``p``'s edges by destination, in the order
   put within one destination), and returns a ``(LocalFeatureStore, LocalGraphStore)``
   pair that behaves as a partition opened from a folder.

**Ids.** Node ids are the graph's (``node_pb`` is indexed by them). Edge ids are the
ones put with the edges (``from_data(edge_id, ...)``): the edges kept by all ranks
together must number them ``0 .. E - 1``. Where none were put, an edge's id is its
position among all partitions' edges: partition 0's first, each partition's by
destination (in the order put within one).

**Attributes.** Node rows are the owned nodes' (from the rows of ``node_id``, or from a
tensor put with one row per node of the graph); a node ``time`` is also kept for the
halo nodes (temporal sampling reads it). In a homogeneous graph, attributes put under
group ``None`` whose name starts with ``edge_`` (PyG's ``edge_attr``, ``edge_time``) are
edge attributes, row-aligned with the edges as put, as are those under ``(None, None)``
(by ``edge_id`` when the feature store has edge ids).

**Memory.** Beside the partition, every rank holds the relabelling of every node: 8
bytes per node (as the ``node_pb`` it comes from) and the owned-id tables (8 bytes per
node, views of one sorted copy).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.format._identity import partition_uid
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.store._feature_store import LocalFeatureStore
from pyg_dist.store._graph_store import CSC, LocalGraphStore
from pyg_dist.store._memory_plan import (KeptEdges, MemoryPlan, NodeBook, attr_specs,
                                         feature_rows, halo_rows, rows_for_every_node)
from pyg_dist.store._original_ids import OwnedIds, PartitionIds
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, edge_key


def plan_partition(features: LocalFeatureStore, graph: LocalGraphStore) -> MemoryPlan:
    """Checks stores built in memory and keeps the edges this partition owns (local).

    Raises:
        ValueError: a one-line error naming what is missing or inconsistent (no
            ``node_pb``, a book of the wrong length or with partitions outside
            ``[0, num_partitions)``, ``partition_idx`` out of range, edges of unknown
            node types, attributes without rows for owned nodes).
    """
    if features.is_partitioned or features.memory is None:
        raise ValueError("data: the graph store was built in memory but the feature store "
                         "was opened from a partition folder; build both in memory or open "
                         "both with from_partition")
    if graph.node_pb is None:
        raise ValueError("data: stores built in memory need a partition book to be sampled: "
                         "set graph_store.node_pb (the partition of every node), "
                         "num_partitions and partition_idx (or open a partition folder with "
                         "from_partition)")
    num_parts, part = _check_parts(graph)
    books = _books(graph, num_parts)
    edges = {t: _kept(graph, t, books, part) for t in _edge_types(graph, books)}
    plan = MemoryPlan(features, graph, part, num_parts, graph.is_hetero, books, edges, {}, {})
    plan.node_specs, plan.edge_specs = attr_specs(plan)
    plan.csc = {t: _csc(plan, t) for t in edges}
    for edge_type, (_, indices) in plan.csc.items():
        book = books[edge_type[0]]
        lo, hi = book.offsets[part], book.offsets[part + 1]
        outside = indices[(indices < lo) | (indices >= hi)]
        plan.halo[edge_type[0]] = torch.unique(torch.cat([plan.halo.get(
            edge_type[0], outside), outside]))
    plan.halo_attrs = halo_rows(plan, plan.halo)
    plan.node_feats, plan.edge_feats = feature_rows(plan)
    plan.every_node = rows_for_every_node(plan)
    return plan


def _check_parts(graph: LocalGraphStore) -> Tuple[int, int]:
    num_parts, part = graph.num_partitions, graph.partition_idx
    meta_parts = graph.meta.get("num_parts") if isinstance(graph.meta, dict) else None
    for name, value in (("num_partitions", num_parts), ("partition_idx", part)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"data: graph_store.{name} must be an int, got {value!r}")
    if num_parts < 1:
        raise ValueError(f"data: graph_store.num_partitions must be >= 1, got {num_parts}")
    if meta_parts is not None and meta_parts != num_parts:
        raise ValueError(f"data: graph_store.meta['num_parts'] is {meta_parts} but "
                         f"graph_store.num_partitions is {num_parts}")
    if not 0 <= part < num_parts:
        raise ValueError(f"data: graph_store.partition_idx {part} is outside [0, "
                         f"{num_parts}) (num_partitions={num_parts})")
    return num_parts, part


def _books(graph: LocalGraphStore, num_parts: int) -> Dict[NodeType, NodeBook]:
    """The node book of every node type, checked (one partition per node, in range)."""
    given = graph.node_pb
    if graph.is_hetero != isinstance(given, dict):
        raise ValueError(f"data: graph_store.node_pb must be "
                         f"{'a dict of tensors by node type' if graph.is_hetero else 'a tensor'}"
                         f" for a {'heterogeneous' if graph.is_hetero else 'homogeneous'} graph, "
                         f"got {type(given).__name__}")
    given = given if isinstance(given, dict) else {HOMO_NODE: given}
    books = {}
    for node_type, owner in given.items():
        what = f"graph_store.node_pb{'' if node_type == HOMO_NODE else f'[{node_type!r}]'}"
        if not isinstance(owner, Tensor) or owner.dim() != 1 or \
                owner.dtype.is_floating_point or owner.dtype == torch.bool:
            raise ValueError(f"data: {what} must be a 1-D integer tensor (the partition of "
                             f"every node), got {getattr(owner, 'shape', type(owner).__name__)}")
        owner = owner.long()
        if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
            bad = int(owner.min()) if int(owner.min()) < 0 else int(owner.max())
            raise ValueError(f"data: {what} names partition {bad}, outside [0, {num_parts}) "
                             f"(num_partitions={num_parts})")
        books[str(node_type)] = NodeBook.of(owner, num_parts)
    return books


def _edge_types(graph: LocalGraphStore, books: Dict[NodeType, NodeBook]) -> List[EdgeType]:
    """The edge types put, each checked against the node books' sizes."""
    types = []
    for attr in graph.memory.all_attrs():
        if attr.layout.value != "coo":
            raise ValueError(f"data: edges of {attr.edge_type!r} were put in {attr.layout.value} "
                             f"layout; put them in COO layout (as from_data does)")
        edge_type = HOMO_EDGE if attr.edge_type is None else tuple(attr.edge_type)
        for end, node_type in ((0, edge_type[0]), (1, edge_type[2])):
            if node_type not in books:
                raise ValueError(f"data: edge type {edge_type!r} names node type "
                                 f"{node_type!r}, which graph_store.node_pb does not have")
            size = attr.size[end] if attr.size is not None else None
            if size is not None and size != books[node_type].owner.numel():
                raise ValueError(f"data: graph_store.node_pb has {books[node_type].owner.numel()}"
                                 f" entries for node type {node_type!r} but edges of "
                                 f"{edge_type!r} were put with {size} nodes")
        types.append(edge_type)
    return types


def _kept(graph: LocalGraphStore, edge_type: EdgeType, books: Dict[NodeType, NodeBook],
          part: int) -> KeptEdges:
    """The edges of ``edge_type`` whose destination ``part`` owns, by destination."""
    group = None if edge_type == HOMO_EDGE else edge_type
    attr = next(a for a in graph.memory.all_attrs() if a.edge_type == group)
    src, dst = graph.memory.get(attr)
    edge_id = graph.memory.get_id(attr)
    src_book, dst_book = books[edge_type[0]], books[edge_type[2]]
    for name, ids, book in (("sources", src, src_book), ("destinations", dst, dst_book)):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= book.owner.numel()):
            raise ValueError(f"data: edges of {edge_type!r} have {name} outside [0, "
                             f"{book.owner.numel()}) (the nodes of graph_store.node_pb)")
    if edge_id is not None and edge_id.numel() != src.numel():
        raise ValueError(f"data: edges of {edge_type!r} have {edge_id.numel()} edge ids for "
                         f"{src.numel()} edges")
    position = torch.nonzero(dst_book.owner[dst] == part).view(-1)
    position = position[torch.sort(dst[position], stable=True)[1]]
    kept_id = None if edge_id is None else edge_id.long()[position]
    if kept_id is not None and torch.unique(kept_id).numel() != kept_id.numel():
        raise ValueError(f"data: edges of {edge_type!r} repeat an edge id")
    return KeptEdges(src.long()[position], dst.long()[position], position, kept_id, src.numel())


# ---- building the partition ----------------------------------------------------------
def _edge_counts(plan: MemoryPlan, infos: List[Dict[str, Any]]) -> Dict[EdgeType, List[int]]:
    """Edges per partition and edge type, from every rank's :meth:`MemoryPlan.info`."""
    counts: Dict[EdgeType, List[Optional[int]]] = {t: [None] * plan.num_parts
                                                   for t in plan.edges}
    for info in infos:
        for edge_type in plan.edges:
            got, have = info["edges"][edge_key(edge_type)], counts[edge_type][info["part"]]
            if have is not None and have != got:
                raise ValueError(f"data: ranks serving partition {info['part']} hold "
                                 f"different edges of {edge_key(edge_type)} ({have} vs {got})")
            counts[edge_type][info["part"]] = got
    return {t: [c or 0 for c in v] for t, v in counts.items()}


def _check_edge_ids(edge_type: EdgeType, infos: List[Dict[str, Any]], total: int) -> None:
    """Ids put with the edges must number every partition's edges ``0 .. total - 1``."""
    given = [info["ids"][edge_key(edge_type)] for info in infos]
    if all(g is None for g in given):
        return
    if any(g is None for g in given):
        raise ValueError(f"data: some ranks put edge ids with the edges of "
                         f"{edge_key(edge_type)} and others did not (from_data(edge_id=...))")
    seen = {info["part"]: g for info, g in zip(infos, given)}
    if max(g[1] for g in seen.values()) >= total or \
            sum(g[0] for g in seen.values()) != total * (total - 1) // 2:
        raise ValueError(f"data: the edge ids of {edge_key(edge_type)} kept by the partitions "
                         f"(each edge at its destination's owner) do not number their "
                         f"{total} edges 0 .. {total - 1}")


def options_meta(plan: MemoryPlan) -> PartitionMeta:
    """The graph's description as far as this rank knows it alone (its own edge counts;
    no ``uid``): enough to check sampling options before the ranks exchange counts."""
    counts = {t: [k.src.numel() if p == plan.part else 0 for p in range(plan.num_parts)]
              for t, k in plan.edges.items()}
    return _meta(plan, counts, None)


def _meta(plan: MemoryPlan, counts: Dict[EdgeType, List[int]],
          infos: Optional[List[Dict[str, Any]]]) -> PartitionMeta:
    node_types = tuple(plan.books)
    edge_types = tuple(plan.edges)
    meta = PartitionMeta(
        num_parts=plan.num_parts, is_hetero=plan.is_hetero, node_types=node_types,
        edge_types=edge_types,
        num_nodes={t: b.owner.numel() for t, b in plan.books.items()},
        num_edges={t: sum(c) for t, c in counts.items()},
        node_offsets={t: b.offsets for t, b in plan.books.items()},
        edge_offsets={t: (0,) + tuple(int(v) for v in torch.cumsum(torch.tensor(c), 0))
                      for t, c in counts.items()},
        node_attrs=plan.node_specs, edge_attrs=plan.edge_specs, method="given")
    meta.validate("stores built in memory")
    if infos is None:
        return meta
    digests = {info["part"]: info["digest"] for info in infos}
    uid = partition_uid(meta.to_json(), [digests.get(p, "") for p in range(plan.num_parts)])
    return dataclasses.replace(meta, uid=uid)


def _id_tables(plan: MemoryPlan, meta: PartitionMeta, csc: Dict[EdgeType, CSC]
               ) -> PartitionIds:
    """Every partition's node tables (from the books) and this partition's edge ids."""
    held: Dict[Tuple[str, int], Dict[Any, OwnedIds]] = {}
    for p in range(plan.num_parts):
        held["node", p] = {t: OwnedIds(b.owned(p), b.offsets[p], b.owner.numel(),
                                       f"node type '{t}'", p) for t, b in plan.books.items()}
    edges = {}
    for edge_type, kept in plan.edges.items():
        start = csc[edge_type].edge_offset
        ids = kept.edge_id if kept.edge_id is not None else \
            torch.arange(start, start + kept.src.numel())
        edges[edge_type] = OwnedIds(ids, start, meta.num_edges[edge_type],
                                    f"edge type {edge_key(edge_type)}", plan.part)
    held["edge", plan.part] = edges
    return PartitionIds(meta, None, held)


def _csc(plan: MemoryPlan, edge_type: EdgeType) -> Tuple[Tensor, Tensor]:
    """``(indptr, indices)`` of the kept edges of ``edge_type``, in relabelled ids."""
    kept = plan.edges[edge_type]
    src_book, dst_book = plan.books[edge_type[0]], plan.books[edge_type[2]]
    start = dst_book.offsets[plan.part]
    column = dst_book.new_id[kept.dst] - start  # owned ids relabel in order: still sorted
    num_dst = dst_book.offsets[plan.part + 1] - start
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(column, minlength=num_dst), 0, out=indptr[1:])
    return indptr, src_book.new_id[kept.src]


def build_partition(plan: MemoryPlan, infos: List[Dict[str, Any]]
                    ) -> Tuple[LocalFeatureStore, LocalGraphStore]:
    """The partition this rank serves, as stores opened from a folder would hold it.

    Args:
        plan (MemoryPlan): this rank's :func:`plan_partition`.
        infos (List[dict]): every rank's :meth:`MemoryPlan.info`, by rank.

    Raises:
        ValueError: edge ids that do not number the edges, or ranks of one partition
            holding different edges (the same message on every rank).
    """
    counts = _edge_counts(plan, infos)
    for edge_type in plan.edges:
        _check_edge_ids(edge_type, infos, sum(counts[edge_type]))
    meta = _meta(plan, counts, infos)
    csc = {t: CSC(indptr, indices, meta.node_offsets[t[2]][plan.part],
                  meta.edge_offsets[t][plan.part]) for t, (indptr, indices) in plan.csc.items()}
    ids = _id_tables(plan, meta, csc)
    graph = LocalGraphStore(meta, plan.part, csc, plan.halo, plan.halo_attrs)
    graph.id_tables = ids
    features = LocalFeatureStore(meta, plan.part, plan.node_feats, plan.edge_feats, {})
    features.id_tables = ids
    features.every_node = dict(plan.every_node)
    features.labels = plan.features.labels  # as PyG's scripts set them (checked)
    return features, graph
