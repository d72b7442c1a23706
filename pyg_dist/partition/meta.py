"""``META.json``: the versioned description of a partitioned graph (format v1).

Homogeneous graphs are written with plain values (``num_nodes: 2708``,
``node_offsets: [0, 1354, 2708]``), heterogeneous ones with dicts keyed by node
type or by ``"src__rel__dst"`` edge key, as DESIGN contract 3 says. In memory both
are held as dicts keyed by type, so the rest of the code has one path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from pyg_dist.partition.book import RangeBook
from pyg_dist.typing import (HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, edge_key, edge_type_of,
                             parse_edge_key)

FORMAT = "pyg_dist"
VERSION = 1


class PartitionFormatError(ValueError):
    """A partition folder is missing a file, has another version, or is inconsistent."""


@dataclass(frozen=True)
class AttrSpec:
    """dtype and per-row shape of a stored attribute."""
    dtype: str
    shape: Tuple[int, ...]

    def to_json(self) -> Dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "AttrSpec":
        return cls(str(obj["dtype"]), tuple(int(s) for s in obj["shape"]))


@dataclass(frozen=True)
class PartStats:
    """Sizes of one partition (printed by the CLI, kept for users)."""
    owned_nodes: Dict[NodeType, int]
    halo_nodes: Dict[NodeType, int]
    edges: Dict[EdgeType, int]
    cut_edges: Dict[EdgeType, int]
    train_nodes: int

    def to_json(self) -> Dict[str, Any]:
        return {"owned_nodes": dict(self.owned_nodes), "halo_nodes": dict(self.halo_nodes),
                "edges": {edge_key(k): v for k, v in self.edges.items()},
                "cut_edges": {edge_key(k): v for k, v in self.cut_edges.items()},
                "train_nodes": self.train_nodes}

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "PartStats":
        return cls(owned_nodes=dict(obj["owned_nodes"]), halo_nodes=dict(obj["halo_nodes"]),
                   edges={parse_edge_key(k): v for k, v in obj["edges"].items()},
                   cut_edges={parse_edge_key(k): v for k, v in obj["cut_edges"].items()},
                   train_nodes=int(obj["train_nodes"]))


@dataclass(frozen=True)
class PartitionMeta:
    """Everything a process needs to know about the whole partitioned graph.

    The partition books are derived from ``node_offsets`` / ``edge_offsets``:
    partition ``p`` owns node ids ``[node_offsets[t][p], node_offsets[t][p+1])`` of
    type ``t`` and, likewise, the edges whose destination it owns.
    """
    num_parts: int
    is_hetero: bool
    node_types: Tuple[NodeType, ...]
    edge_types: Tuple[EdgeType, ...]
    num_nodes: Dict[NodeType, int]
    num_edges: Dict[EdgeType, int]
    node_offsets: Dict[NodeType, Tuple[int, ...]]
    edge_offsets: Dict[EdgeType, Tuple[int, ...]]
    node_attrs: Dict[NodeType, Dict[str, AttrSpec]] = field(default_factory=dict)
    edge_attrs: Dict[EdgeType, Dict[str, AttrSpec]] = field(default_factory=dict)
    splits: Tuple[str, ...] = ()
    method: str = "metis"
    seed: int = 0
    parts: Tuple[PartStats, ...] = ()

    def node_type(self, group: Optional[NodeType]) -> NodeType:
        """Resolves a user-given node type (``None`` for homogeneous graphs)."""
        if group is None:
            if self.is_hetero:
                raise ValueError(f"the graph is heterogeneous: name a node type "
                                 f"(one of {list(self.node_types)})")
            return HOMO_NODE
        if group not in self.num_nodes:
            raise KeyError(f"unknown node type {group!r} (node types: {list(self.node_types)})")
        return group

    def edge_type(self, group: Optional[Any]) -> EdgeType:
        """Resolves a user-given edge type (``None`` for homogeneous graphs)."""
        if group is None and self.is_hetero:
            raise ValueError(f"the graph is heterogeneous: name an edge type "
                             f"(one of {[edge_key(t) for t in self.edge_types]})")
        edge_type = edge_type_of(group)
        if edge_type not in self.num_edges:
            raise KeyError(f"unknown edge type {edge_type!r} "
                           f"(edge types: {[edge_key(t) for t in self.edge_types]})")
        return edge_type

    def node_book(self, node_type: Optional[NodeType] = None) -> RangeBook:
        node_type = self.node_type(node_type)
        return RangeBook(self.node_offsets[node_type], name=f"node ids of type '{node_type}'")

    def edge_book(self, edge_type: Optional[Any] = None) -> RangeBook:
        edge_type = self.edge_type(edge_type)
        return RangeBook(self.edge_offsets[edge_type],
                         name=f"edge ids of type {edge_key(edge_type)}")

    # ---- JSON ------------------------------------------------------------------
    def to_json(self) -> Dict[str, Any]:
        def by_node(values: Dict[NodeType, Any]) -> Any:
            return values[HOMO_NODE] if not self.is_hetero else dict(values)

        def by_edge(values: Dict[EdgeType, Any]) -> Any:
            if not self.is_hetero:
                return values[HOMO_EDGE]
            return {edge_key(k): v for k, v in values.items()}

        return {
            "format": FORMAT, "version": VERSION, "num_parts": self.num_parts,
            "is_hetero": self.is_hetero, "node_types": list(self.node_types),
            "edge_types": [list(t) for t in self.edge_types],
            "num_nodes": by_node(self.num_nodes), "num_edges": by_edge(self.num_edges),
            "node_offsets": by_node({k: list(v) for k, v in self.node_offsets.items()}),
            "edge_offsets": by_edge({k: list(v) for k, v in self.edge_offsets.items()}),
            "node_attrs": {t: {a: s.to_json() for a, s in d.items()}
                           for t, d in self.node_attrs.items()},
            "edge_attrs": {edge_key(t): {a: s.to_json() for a, s in d.items()}
                           for t, d in self.edge_attrs.items()},
            "splits": list(self.splits), "method": self.method, "seed": self.seed,
            "parts": [p.to_json() for p in self.parts],
        }

    @classmethod
    def from_json(cls, obj: Dict[str, Any], source: str = "META.json") -> "PartitionMeta":
        """Parses and validates a ``META.json`` document.

        Raises:
            PartitionFormatError: naming the field that is missing or wrong.
        """
        _check_header(obj, source)
        is_hetero = bool(obj["is_hetero"])
        node_types = tuple(str(t) for t in obj["node_types"])
        edge_types = tuple(tuple(str(s) for s in t) for t in obj["edge_types"])

        def by_node(value: Any) -> Dict[NodeType, Any]:
            return dict(value) if is_hetero else {HOMO_NODE: value}

        def by_edge(value: Any) -> Dict[EdgeType, Any]:
            if not is_hetero:
                return {HOMO_EDGE: value}
            return {parse_edge_key(k): v for k, v in value.items()}

        meta = cls(
            num_parts=int(obj["num_parts"]), is_hetero=is_hetero,
            node_types=node_types, edge_types=edge_types,  # type: ignore[arg-type]
            num_nodes={k: int(v) for k, v in by_node(obj["num_nodes"]).items()},
            num_edges={k: int(v) for k, v in by_edge(obj["num_edges"]).items()},
            node_offsets={k: tuple(int(x) for x in v)
                          for k, v in by_node(obj["node_offsets"]).items()},
            edge_offsets={k: tuple(int(x) for x in v)
                          for k, v in by_edge(obj["edge_offsets"]).items()},
            node_attrs={t: {a: AttrSpec.from_json(s) for a, s in d.items()}
                        for t, d in obj.get("node_attrs", {}).items()},
            edge_attrs={parse_edge_key(t): {a: AttrSpec.from_json(s) for a, s in d.items()}
                        for t, d in obj.get("edge_attrs", {}).items()},
            splits=tuple(obj.get("splits", ())), method=str(obj.get("method", "")),
            seed=int(obj.get("seed", 0)),
            parts=tuple(PartStats.from_json(p) for p in obj.get("parts", [])),
        )
        meta.validate(source)
        return meta

    def validate(self, source: str = "META.json") -> None:
        """Checks that types, counts and offsets agree with each other."""
        def fail(msg: str) -> None:
            raise PartitionFormatError(f"{source}: {msg}")

        if self.num_parts < 1:
            fail(f"num_parts must be >= 1, got {self.num_parts}")
        for t in self.node_types:
            offs = self.node_offsets.get(t)
            if offs is None or t not in self.num_nodes:
                fail(f"node type '{t}' has no num_nodes/node_offsets entry")
            _check_offsets(offs, self.num_parts, self.num_nodes[t], f"node_offsets['{t}']", fail)
        for et in self.edge_types:
            offs = self.edge_offsets.get(et)
            if offs is None or et not in self.num_edges:
                fail(f"edge type {edge_key(et)} has no num_edges/edge_offsets entry")
            if et[0] not in self.node_types or et[2] not in self.node_types:
                fail(f"edge type {edge_key(et)} names an unknown node type")
            _check_offsets(offs, self.num_parts, self.num_edges[et],
                           f"edge_offsets['{edge_key(et)}']", fail)


def _check_header(obj: Dict[str, Any], source: str) -> None:
    if not isinstance(obj, dict):
        raise PartitionFormatError(f"{source}: expected a JSON object")
    if obj.get("format") != FORMAT:
        raise PartitionFormatError(f"{source}: format is {obj.get('format')!r}, "
                                   f"expected {FORMAT!r}: not a pyg_dist partition")
    if obj.get("version") != VERSION:
        raise PartitionFormatError(
            f"{source}: format version {obj.get('version')!r} is not supported by this "
            f"pyg_dist (reads version {VERSION}); re-partition the graph with this version")
    required = ("num_parts", "is_hetero", "node_types", "edge_types", "num_nodes",
                "num_edges", "node_offsets", "edge_offsets")
    missing: List[str] = [k for k in required if k not in obj]
    if missing:
        raise PartitionFormatError(f"{source}: missing field(s) {', '.join(missing)}")


def _check_offsets(offs: Tuple[int, ...], num_parts: int, total: int, what: str,
                   fail: Any) -> None:
    if len(offs) != num_parts + 1:
        fail(f"{what} has {len(offs)} entries, expected num_parts + 1 = {num_parts + 1}")
    if offs[0] != 0 or offs[-1] != total or any(b < a for a, b in zip(offs, offs[1:])):
        fail(f"{what} = {list(offs)} is not a non-decreasing range from 0 to {total}")
