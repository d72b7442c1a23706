"""One rank's stores built in memory, checked and reduced to the partition it owns.

:class:`MemoryPlan` is what :func:`~pyg_dist.store._memory_partition.plan_partition`
makes of a rank's stores alone (no communication): the node books and the relabelling
they define, the edges this partition owns, the CSC over relabelled ids, the halo, and
the owned rows of every attribute (see :mod:`pyg_dist.store._memory_partition` for the
rules); :func:`~pyg_dist.store._memory_partition.build_partition` completes it once
every rank's :meth:`MemoryPlan.info` is known.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Dict, Hashable, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.format._identity import part_digest
from pyg_dist.format._meta import AttrSpec
from pyg_dist.format._schema import dtype_name
from pyg_dist.store._every_node import is_every_node
from pyg_dist.store._feature_store import LocalFeatureStore
from pyg_dist.store._from_tensors import MemoryFeatures
from pyg_dist.store._graph_store import LocalGraphStore
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, PYG_HOMO_EDGE, EdgeType, NodeType, edge_key

HALO_ATTRS = ("time",)


@dataclass
class NodeBook:
    """One node type's partition book and the relabelling it defines."""
    owner: Tensor  #: partition of every original id
    offsets: Tuple[int, ...]  #: partition ``p`` owns relabelled ``[offsets[p], offsets[p+1])``
    order: Tensor  #: original id of every relabelled id (each range increasing)
    new_id: Tensor  #: relabelled id of every original id

    @classmethod
    def of(cls, owner: Tensor, num_parts: int) -> "NodeBook":
        order = torch.sort(owner, stable=True)[1]
        new_id = torch.empty_like(order)
        new_id[order] = torch.arange(order.numel())
        counts = torch.bincount(owner, minlength=num_parts)
        offsets = (0,) + tuple(int(v) for v in torch.cumsum(counts, 0))
        return cls(owner, offsets, order, new_id)

    def owned(self, part: int) -> Tensor:
        """Original ids of partition ``part``'s nodes, increasing."""
        return self.order[self.offsets[part]:self.offsets[part + 1]]


@dataclass
class KeptEdges:
    """This partition's edges of one type (destination owned here), by destination."""
    src: Tensor  #: original source ids
    dst: Tensor  #: original destination ids
    position: Tensor  #: position of each among the edges put
    edge_id: Optional[Tensor]  #: the ids put with them (``None``: none were put)
    num_put: int  #: edges put (kept or not)


@dataclass
class MemoryPlan:
    """One rank's stores built in memory, checked and reduced to the partition it owns
    (:func:`plan_partition`); :func:`build_partition` completes it."""
    features: LocalFeatureStore
    graph: LocalGraphStore
    part: int
    num_parts: int
    is_hetero: bool
    books: Dict[NodeType, NodeBook]
    edges: Dict[EdgeType, KeptEdges]
    node_specs: Dict[NodeType, Dict[str, AttrSpec]]
    edge_specs: Dict[EdgeType, Dict[str, AttrSpec]]
    #: per edge type, ``(indptr, indices)`` over relabelled ids (the CSC to serve)
    csc: Dict[EdgeType, Tuple[Tensor, Tensor]] = dataclasses.field(default_factory=dict)
    halo: Dict[NodeType, Tensor] = dataclasses.field(default_factory=dict)
    halo_attrs: Dict[NodeType, Dict[str, Tensor]] = dataclasses.field(default_factory=dict)
    node_feats: Dict[NodeType, Dict[str, Tensor]] = dataclasses.field(default_factory=dict)
    edge_feats: Dict[EdgeType, Dict[str, Tensor]] = dataclasses.field(default_factory=dict)
    #: node attributes put for every node (PyG's node ``time``), by original id
    every_node: Dict[Tuple[NodeType, str], Tensor] = dataclasses.field(default_factory=dict)

    def must_match(self) -> Dict[str, Any]:
        """What every rank's stores must agree on."""
        digest = hashlib.sha256()
        for node_type in sorted(self.books):
            digest.update(node_type.encode())
            digest.update(self.books[node_type].owner.numpy().tobytes())
        return {"num_parts": self.num_parts, "is_hetero": self.is_hetero,
                "edge types": sorted(edge_key(t) for t in self.edges),
                "num_nodes": {t: b.owner.numel() for t, b in sorted(self.books.items())},
                "partition book (node_pb digest)": digest.hexdigest()[:16],
                "attributes": _spec_doc(self.node_specs, self.edge_specs)}

    def info(self) -> Dict[str, Any]:
        """What this rank tells the others: its edge counts, whether its edges came
        with ids (and their sum and maximum), and the digest of what it holds."""
        out: Dict[str, Any] = {"part": self.part, "edges": {}, "ids": {}}
        for edge_type, kept in self.edges.items():
            key, ids = edge_key(edge_type), kept.edge_id
            out["edges"][key] = kept.src.numel()
            out["ids"][key] = None if ids is None else (int(ids.sum()) if ids.numel() else 0,
                                                       int(ids.max()) if ids.numel() else -1)
        out["digest"] = part_digest(
            {t: b.owned(self.part) for t, b in self.books.items()},
            {t: torch.cat([k.src, k.dst] + ([] if k.edge_id is None else [k.edge_id]))
             for t, k in self.edges.items()})
        return out


def _spec_doc(nodes: Dict[Any, Dict[str, AttrSpec]], edges: Dict[Any, Dict[str, AttrSpec]]
              ) -> Dict[str, Any]:
    return {**{f"node {t}": {a: s.to_json() for a, s in sorted(d.items())}
               for t, d in sorted(nodes.items())},
            **{f"edge {edge_key(t)}": {a: s.to_json() for a, s in sorted(d.items())}
               for t, d in sorted(edges.items())}}


# ---- attributes ----------------------------------------------------------------------
def attr_home(plan: MemoryPlan, group: Hashable, name: str) -> Tuple[str, Any]:
    """``("node", node type)`` or ``("edge", edge type)`` of an attribute put."""
    if not plan.is_hetero:
        if group == PYG_HOMO_EDGE or (group is None and name.startswith("edge_")):
            return "edge", HOMO_EDGE
        if group is None:
            return "node", HOMO_NODE
    elif isinstance(group, str) and group in plan.books:
        return "node", group
    elif isinstance(group, tuple) and group in plan.edges:
        return "edge", group
    raise ValueError(f"data: attribute '{name}' was put for group {group!r}, which is "
                     f"no node or edge type of the graph store")


def attr_specs(plan: MemoryPlan) -> Tuple[Dict[NodeType, Dict[str, AttrSpec]],
                                      Dict[EdgeType, Dict[str, AttrSpec]]]:
    nodes: Dict[NodeType, Dict[str, AttrSpec]] = {}
    edges: Dict[EdgeType, Dict[str, AttrSpec]] = {}
    for (group, name), tensor in plan.features.memory.tensors.items():
        kind, home = attr_home(plan, group, name)
        spec = AttrSpec(dtype_name(tensor.dtype), tuple(tensor.shape[1:]))
        (nodes if kind == "node" else edges).setdefault(home, {})[name] = spec
    return nodes, edges


def _node_rows(plan: MemoryPlan, group: Hashable, name: str, ids: Tensor,
               what: str) -> Tensor:
    memory: MemoryFeatures = plan.features.memory
    try:
        rows = memory.rows(group, name, ids)
    except ValueError as exc:
        raise ValueError(f"data: node attribute '{name}' has no row for some of the "
                         f"{what} of partition {plan.part}: {exc}") from None
    return memory.tensors[(group, name)].index_select(0, rows)


def _edge_rows(plan: MemoryPlan, group: Hashable, name: str, kept: KeptEdges) -> Tensor:
    memory: MemoryFeatures = plan.features.memory
    tensor = memory.tensors[(group, name)]
    if kept.edge_id is not None and group is not None and \
            memory.global_ids.get(group) is not None:  # by edge id (group None: node ids)
        rows = memory.rows(group, name, kept.edge_id)
    elif tensor.size(0) != kept.num_put:
        raise ValueError(f"data: edge attribute '{name}' has {tensor.size(0)} rows for the "
                         f"{kept.num_put} edges put (one row per edge, in the order put)")
    else:
        rows = kept.position
    return tensor.index_select(0, rows)


def feature_rows(plan: MemoryPlan) -> Tuple[Dict[NodeType, Dict[str, Tensor]],
                                             Dict[EdgeType, Dict[str, Tensor]]]:
    """Owned node rows (relabelled order) and owned edge rows (CSC order)."""
    nodes: Dict[NodeType, Dict[str, Tensor]] = {}
    edges: Dict[EdgeType, Dict[str, Tensor]] = {}
    for group, name in plan.features.memory.keys():
        kind, home = attr_home(plan, group, name)
        if kind == "node":
            nodes.setdefault(home, {})[name] = _node_rows(
                plan, group, name, plan.books[home].owned(plan.part), "nodes it owns")
        else:
            edges.setdefault(home, {})[name] = _edge_rows(plan, group, name, plan.edges[home])
    return nodes, edges


def halo_rows(plan: MemoryPlan, halo: Dict[NodeType, Tensor]
                ) -> Dict[NodeType, Dict[str, Tensor]]:
    """:data:`HALO_ATTRS` rows of the halo nodes (row-aligned with ``halo``)."""
    out: Dict[NodeType, Dict[str, Tensor]] = {}
    for group, name in plan.features.memory.keys():
        kind, home = attr_home(plan, group, name)
        if kind == "node" and name in HALO_ATTRS and home in halo:
            original = plan.books[home].order[halo[home]]
            out.setdefault(home, {})[name] = _node_rows(plan, group, name, original,
                                                        "halo nodes (sources of its edges)")
    return out


def rows_for_every_node(plan: MemoryPlan) -> Dict[Tuple[NodeType, str], Tensor]:
    """Node attributes answered for every node (:mod:`pyg_dist.store._every_node`) that
    the user put for every node: the tensor put, read by original id."""
    out = {}
    memory: MemoryFeatures = plan.features.memory
    for group, name in memory.keys():
        kind, home = attr_home(plan, group, name)
        if kind == "node" and is_every_node(home, name):
            every = torch.arange(plan.books[home].owner.numel())
            try:
                out[home, name] = memory.get(group, name, every)
            except ValueError:  # rows of some nodes only: the partition's rows answer
                continue
    return out
