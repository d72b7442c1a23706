"""``META.json``: the versioned description of a partitioned graph (format v2; v1 read).

Homogeneous graphs are written with plain values (``num_nodes: 2708``,
``node_offsets: [0, 1354, 2708]``), heterogeneous ones with dicts keyed by node
type or by ``"src__rel__dst"`` edge key, as DESIGN contract 3 says. In memory both
are held as dicts keyed by type, so the rest of the code has one path.

Fields: ``format`` (``"pyg_dist"``), ``version`` (2; folders of version 1 are read too:
they differ only in where the id maps live, see :mod:`pyg_dist.format._partition_io`), ``num_parts``, ``is_hetero``,
``node_types``, ``edge_types`` (``[src, rel, dst]`` lists), ``num_nodes``,
``num_edges``, ``node_offsets``, ``edge_offsets``, ``node_attrs``/``edge_attrs``
(per type, attribute name -> ``{"dtype": "float32", "shape": [per-row shape]}``),
``splits``, ``method``, ``seed``, ``parts`` (per-partition statistics), ``uid`` and
``digests`` (optional: the digest algorithm, ``"blake2b-128"``, when every
``part_<p>/MANIFEST.json`` records the size and digest of its files, see
:mod:`pyg_dist.format._part_manifest`; absent in folders written before digests).

``uid`` identifies the partitioning: a 64-character hex sha256 over the fields that
define it and the node and edge id maps (:mod:`pyg_dist.format._identity`). The
same data, method and seed give the same uid; another seed, method, number of parts
or graph structure gives another (attribute values are not hashed, their specs are).
Every ``part_<p>/graph.pt`` repeats it, and loading refuses a partition whose uid
differs (a partition folder of another run mixed in). Ranks of one job compare it to
make sure they load the same partitioning. ``uid`` is optional on read: folders
written before it existed get one derived from a sha256 of their canonical
``META.json`` document (:attr:`PartitionMeta.uid_derived` is then ``True``), and
their ``graph.pt`` files must then carry none.

Every field is type-checked on read: a wrong type raises :class:`PartitionFormatError`
naming ``META.json`` and the field.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from pyg_dist.format._book import RangeBook
from pyg_dist.format._digest import ALGORITHM
from pyg_dist.format._identity import fallback_uid
from pyg_dist.format._schema import Field, PartitionFormatError
from pyg_dist._typing import (HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, edge_key, edge_type_of,
                             is_homo_alias, parse_edge_key)

#: the ``format`` field of every ``META.json`` pyg_dist writes
FORMAT = "pyg_dist"
VERSION = 2  #: written; v2 keeps each partition's original ids in its own folder
READS = (1, 2)  #: versions read
_UID = re.compile(r"[0-9a-f]{64}")

__all__ = ["FORMAT", "VERSION", "AttrSpec", "PartStats", "PartitionMeta",
           "PartitionFormatError"]


def _edge_type(key: Field) -> EdgeType:
    """Parses an ``"src__rel__dst"`` key field."""
    try:
        return parse_edge_key(key.as_str())
    except ValueError:
        key.fail('an edge type key "src__rel__dst"')


def _by_edge_key(obj: Field, read: Callable[[Field], Any]) -> Dict[EdgeType, Any]:
    return {_edge_type(obj.child(k, k)): read(v) for k, v in obj.as_dict().items()}


@dataclass(frozen=True)
class AttrSpec:
    """dtype and per-row shape of a stored attribute."""
    dtype: str
    shape: Tuple[int, ...]

    def to_json(self) -> Dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, obj: Field) -> "AttrSpec":
        """Reads ``{"dtype": name, "shape": [...]}``; the dtype must be in the allow-list."""
        return cls(obj["dtype"].as_dtype(), obj["shape"].as_ints(minimum=0))


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
    def from_json(cls, obj: Field) -> "PartStats":
        def count(f: Field) -> int:
            return f.as_int(minimum=0)

        return cls(owned_nodes={k: count(v) for k, v in obj["owned_nodes"].as_dict().items()},
                   halo_nodes={k: count(v) for k, v in obj["halo_nodes"].as_dict().items()},
                   edges=_by_edge_key(obj["edges"], count),
                   cut_edges=_by_edge_key(obj["cut_edges"], count),
                   train_nodes=count(obj["train_nodes"]))


@functools.lru_cache(maxsize=1024)
def _book(offsets: Tuple[int, ...], name: str) -> RangeBook:
    """One book per distinct offsets (books are read-only; samplers ask for one per hop)."""
    return RangeBook(offsets, name=name)


@dataclass(frozen=True)
class PartitionMeta:
    """Everything a process needs to know about the whole partitioned graph.

    The partition books are derived from ``node_offsets`` / ``edge_offsets``:
    partition ``p`` owns node ids ``[node_offsets[t][p], node_offsets[t][p+1])`` of
    type ``t`` and, likewise, the edges whose destination it owns.

    ``uid`` identifies the partitioning (see the module docs); ``uid_derived`` is
    ``True`` when ``META.json`` carried none and ``uid`` was derived from its content.
    ``digests`` names the digest algorithm when every partition records the digests
    of its files in ``part_<p>/MANIFEST.json`` (``""``: written before digests).
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
    uid: str = ""
    uid_derived: bool = False
    version: int = VERSION
    digests: str = ""

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
        """Resolves a user-given edge type (``None`` or PyG's ``(None, None)`` for
        homogeneous graphs)."""
        if is_homo_alias(group) and self.is_hetero:
            raise ValueError(f"the graph is heterogeneous: name an edge type "
                             f"(one of {[edge_key(t) for t in self.edge_types]})")
        edge_type = edge_type_of(group)
        if edge_type not in self.num_edges:
            raise KeyError(f"unknown edge type {edge_type!r} "
                           f"(edge types: {[edge_key(t) for t in self.edge_types]})")
        return edge_type

    def node_book(self, node_type: Optional[NodeType] = None) -> RangeBook:
        node_type = self.node_type(node_type)
        return _book(tuple(self.node_offsets[node_type]), f"node ids of type '{node_type}'")

    def edge_book(self, edge_type: Optional[Any] = None) -> RangeBook:
        edge_type = self.edge_type(edge_type)
        return _book(tuple(self.edge_offsets[edge_type]),
                     f"edge ids of type {edge_key(edge_type)}")

    # ---- torch_geometric.distributed's dict view ------------------------------
    def __getitem__(self, key: str) -> Any:
        """``meta['num_parts']``, ``['is_hetero']``, ``['node_types']`` and
        ``['edge_types']`` as ``torch_geometric.distributed``'s META dict gives them
        (types are ``None`` for a homogeneous graph), so its scripts run unchanged."""
        if key == "num_parts":
            return self.num_parts
        if key == "is_hetero":
            return self.is_hetero
        if key == "node_types":
            return list(self.node_types) if self.is_hetero else None
        if key == "edge_types":
            return [list(t) for t in self.edge_types] if self.is_hetero else None
        raise KeyError(f"PartitionMeta has no dict entry {key!r}: read the attribute instead "
                       f"(entries: num_parts, is_hetero, node_types, edge_types)")

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    # ---- JSON ------------------------------------------------------------------
    def to_json(self) -> Dict[str, Any]:
        def by_node(values: Dict[NodeType, Any]) -> Any:
            return values[HOMO_NODE] if not self.is_hetero else dict(values)

        def by_edge(values: Dict[EdgeType, Any]) -> Any:
            if not self.is_hetero:
                return values[HOMO_EDGE]
            return {edge_key(k): v for k, v in values.items()}

        doc = {
            "format": FORMAT, "version": self.version, "num_parts": self.num_parts,
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
        if self.uid and not self.uid_derived:
            doc["uid"] = self.uid
        if self.digests:
            doc["digests"] = self.digests
        return doc

    @classmethod
    def from_json(cls, obj: Dict[str, Any], source: str = "META.json") -> "PartitionMeta":
        """Parses and validates a ``META.json`` document.

        Raises:
            PartitionFormatError: naming the field that is missing, of a wrong type, or
                inconsistent with the others.
        """
        doc = Field(obj, "", source)
        _check_header(doc)
        is_hetero = doc["is_hetero"].as_bool()

        def by_node(f: Field, read: Callable[[Field], Any]) -> Dict[NodeType, Any]:
            if not is_hetero:
                return {HOMO_NODE: read(f)}
            return {k: read(v) for k, v in f.as_dict().items()}

        def by_edge(f: Field, read: Callable[[Field], Any]) -> Dict[EdgeType, Any]:
            return _by_edge_key(f, read) if is_hetero else {HOMO_EDGE: read(f)}

        def attrs(f: Field) -> Dict[str, AttrSpec]:
            return {a: AttrSpec.from_json(s) for a, s in f.as_dict().items()}

        has_uid = "uid" in obj
        uid = doc.get("uid", None)
        if has_uid and not _UID.fullmatch(uid.as_str()):
            uid.fail("a 64-character lowercase hex string (sha256)")
        meta = cls(
            num_parts=doc["num_parts"].as_int(), is_hetero=is_hetero,
            node_types=doc["node_types"].as_strs(),
            edge_types=tuple(f.as_strs(length=3)  # type: ignore[misc]
                             for f in doc["edge_types"].as_list()),
            num_nodes=by_node(doc["num_nodes"], lambda f: f.as_int(minimum=0)),
            num_edges=by_edge(doc["num_edges"], lambda f: f.as_int(minimum=0)),
            node_offsets=by_node(doc["node_offsets"], lambda f: f.as_ints()),
            edge_offsets=by_edge(doc["edge_offsets"], lambda f: f.as_ints()),
            node_attrs={k: attrs(v) for k, v in doc.get("node_attrs", {}).as_dict().items()},
            edge_attrs=_by_edge_key(doc.get("edge_attrs", {}), attrs),
            splits=doc.get("splits", []).as_strs(), method=doc.get("method", "").as_str(),
            seed=doc.get("seed", 0).as_int(),
            parts=tuple(PartStats.from_json(p) for p in doc.get("parts", []).as_list()),
            uid=uid.value if has_uid else fallback_uid(obj), uid_derived=not has_uid,
            version=int(obj["version"]), digests=_digests(doc),
        )
        meta.validate(source)
        return meta

    def validate(self, source: str = "META.json") -> None:
        """Checks that types, counts and offsets agree with each other."""
        def fail(msg: str) -> None:
            raise PartitionFormatError(f"{source}: {msg}")

        if self.num_parts < 1:
            fail(f"num_parts must be >= 1, got {self.num_parts}")
        _check_keys(self, fail)
        if self.parts and len(self.parts) != self.num_parts:
            fail(f"parts lists {len(self.parts)} partitions, num_parts is {self.num_parts}")
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


def _digests(doc: Field) -> str:
    """The optional ``digests`` field: the algorithm every part manifest uses."""
    if "digests" not in doc.value:
        return ""
    field_ = doc["digests"]
    if field_.as_str() != ALGORITHM:
        field_.fail(f"{ALGORITHM!r}, the digest algorithm this pyg_dist checks")
    return field_.value


def _check_header(doc: Field) -> None:
    obj = doc.value
    if not isinstance(obj, dict):
        raise PartitionFormatError(f"{doc.source}: expected a JSON object")
    if obj.get("format") != FORMAT:
        raise PartitionFormatError(f"{doc.source}: format is {obj.get('format')!r}, "
                                   f"expected {FORMAT!r}: not a pyg_dist partition")
    if obj.get("version") not in READS or isinstance(obj.get("version"), bool):
        raise PartitionFormatError(
            f"{doc.source}: format version {obj.get('version')!r} is not supported by this "
            f"pyg_dist (reads versions {', '.join(map(str, READS))}); re-partition the graph "
            f"with this version")
    required = ("num_parts", "is_hetero", "node_types", "edge_types", "num_nodes",
                "num_edges", "node_offsets", "edge_offsets")
    missing: List[str] = [k for k in required if k not in obj]
    if missing:
        raise PartitionFormatError(f"{doc.source}: missing field(s) {', '.join(missing)}")


def _check_keys(meta: PartitionMeta, fail: Callable[[str], None]) -> None:
    """Every per-type field is keyed by exactly the declared types (attrs: a subset)."""
    node_types, edge_types = set(meta.node_types), set(meta.edge_types)
    if len(node_types) != len(meta.node_types) or len(edge_types) != len(meta.edge_types):
        fail("node_types/edge_types list a type twice")
    for name, keys, types in (("num_nodes", meta.num_nodes, node_types),
                              ("node_offsets", meta.node_offsets, node_types),
                              ("num_edges", meta.num_edges, edge_types),
                              ("edge_offsets", meta.edge_offsets, edge_types)):
        if set(keys) != types:
            fail(f"{name} is keyed by {sorted(map(str, keys))}, expected the declared types "
                 f"{sorted(map(str, types))}")
    for name, keys, types in (("node_attrs", meta.node_attrs, node_types),
                              ("edge_attrs", meta.edge_attrs, edge_types)):
        unknown = set(keys) - types
        if unknown:
            fail(f"{name} names type(s) {sorted(map(str, unknown))} not declared in "
                 f"node_types/edge_types")


def _check_offsets(offs: Tuple[int, ...], num_parts: int, total: int, what: str,
                   fail: Any) -> None:
    if len(offs) != num_parts + 1:
        fail(f"{what} has {len(offs)} entries, expected num_parts + 1 = {num_parts + 1}")
    if offs[0] != 0 or offs[-1] != total or any(b < a for a, b in zip(offs, offs[1:])):
        fail(f"{what} = {list(offs)} is not a non-decreasing range from 0 to {total}")
