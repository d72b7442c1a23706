"""Checks of what a partition's ``.pt`` files hold, before anything uses it.

``torch.load(weights_only=True)`` guarantees a file runs no code; these checks make
sure it cannot crash or mislead the process either: every object has the expected
structure and type, every tensor its dtype and shape, ``indptr`` runs from 0 up to
the edge count without decreasing, every id is in range, attribute tensors match
``META.json``'s spec, and the partition belongs to the same partitioning (``uid``).
Checks are vectorised (one pass over each tensor); tensors come back contiguous.
Failures raise :class:`PartitionFormatError` naming the file and the problem.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, NoReturn, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist.format._meta import AttrSpec, PartitionMeta
from pyg_dist.format._schema import DTYPES, PartitionFormatError, dtype_name
from pyg_dist._typing import EdgeType, NodeType, edge_key, parse_edge_key

_LONG = (torch.int64,)
_INDEX = (torch.int64, torch.int32)


@dataclass
class PartitionGraph:
    """The checked content of ``graph.pt``.

    Args:
        csc: per edge type, ``(indptr, indices)`` of the owned destinations' in-edges.
        halo: per node type, sorted unique global ids of halo nodes.
        halo_attrs: per node type, attributes of the halo nodes (row-aligned).
    """
    csc: Dict[EdgeType, Tuple[Tensor, Tensor]]
    halo: Dict[NodeType, Tensor]
    halo_attrs: Dict[NodeType, Dict[str, Tensor]]


class _Checker:
    """Names one file in its errors and holds the partition it belongs to."""

    def __init__(self, path: Path, meta: PartitionMeta, part: int) -> None:
        self.path, self.meta, self.part = path, meta, part

    def fail(self, message: str) -> NoReturn:
        raise PartitionFormatError(f"{self.path}: {message}")

    def dict(self, value: Any, what: str, keys: Optional[Sequence[str]] = None) -> dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            self.fail(f"{what} must be a dict with string keys, got {type(value).__name__}")
        missing = [k for k in keys or () if k not in value]
        if missing:
            self.fail(f"{what} has no {', '.join(repr(k) for k in missing)}")
        return value

    def tensor(self, value: Any, what: str, dtypes: Sequence[torch.dtype],
               rows: Optional[int] = None, dim: Optional[int] = None) -> Tensor:
        if not isinstance(value, Tensor):
            self.fail(f"{what} must be a tensor, got {type(value).__name__}")
        if value.layout != torch.strided:
            self.fail(f"{what} must be a dense tensor, got layout {value.layout}")
        if value.dtype not in dtypes:
            names = " or ".join(dtype_name(d) for d in dtypes)
            self.fail(f"{what} must be {names}, got {dtype_name(value.dtype)}")
        if dim is not None and value.dim() != dim:
            self.fail(f"{what} must be {dim}-D, got shape {tuple(value.shape)}")
        if value.dim() == 0:
            self.fail(f"{what} must have one row per id, got a 0-D tensor")
        if rows is not None and value.size(0) != rows:
            self.fail(f"{what} has {value.size(0)} rows, expected {rows}")
        return value.contiguous()

    def in_range(self, ids: Tensor, lo: int, hi: int, what: str) -> None:
        if ids.numel() == 0:
            return
        low, high = (int(x) for x in torch.aminmax(ids))
        if low < lo or high >= hi:
            self.fail(f"{what} hold ids outside the range [{lo}, {hi}) "
                      f"(e.g. {low if low < lo else high})")

    def attrs(self, value: Any, what: str, specs: Dict[str, AttrSpec], rows: int,
              exact: bool = True) -> Dict[str, Tensor]:
        """Named attribute tensors: one row each per id, dtype and row shape as in META."""
        value = self.dict(value, what)
        out = {}
        for name, tensor in value.items():
            label = f"{what}, attribute '{name}',"
            spec = specs.get(name)
            if spec is None:
                self.fail(f"{label} is not listed in META.json")
            out[name] = self.tensor(tensor, label, (DTYPES[spec.dtype],), rows=rows)
            if tuple(out[name].shape[1:]) != spec.shape:
                self.fail(f"{label} has per-row shape {list(out[name].shape[1:])}, "
                          f"META.json says {list(spec.shape)}")
        missing = sorted(set(specs) - set(value)) if exact else []
        if missing:
            self.fail(f"{what}: attribute(s) {missing} listed in META.json are missing")
        return out

    def owned(self, node_type: NodeType) -> Tuple[int, int]:
        offsets = self.meta.node_offsets[node_type]
        return offsets[self.part], offsets[self.part + 1]

    def node_type(self, key: Any, what: str) -> NodeType:
        if key not in self.meta.num_nodes:
            self.fail(f"{what} names node type {key!r}, which META.json does not list")
        return key

    def edge_type(self, key: str, what: str) -> EdgeType:
        try:
            edge_type = parse_edge_key(key)
        except ValueError:
            edge_type = None
        if edge_type not in self.meta.num_edges:
            self.fail(f"{what} holds edge type {key}, which META.json does not list")
        return edge_type


def check_uid(path: Path, found: Any, meta: PartitionMeta) -> None:
    """Refuses a ``graph.pt`` whose ``uid`` is not the one of ``META.json``."""
    if found is not None and not isinstance(found, str):
        raise PartitionFormatError(f"{path}: uid must be a string, got {type(found).__name__}")
    if meta.uid_derived and found is not None:
        raise PartitionFormatError(
            f"{path}: carries uid {found} but META.json has none: this partition was "
            f"written by another partitioning run than META.json")
    if not meta.uid_derived and found != meta.uid:
        got = "no uid" if found is None else f"uid {found}"
        raise PartitionFormatError(
            f"{path}: has {got}, but META.json has uid {meta.uid}: this partition was "
            f"written by another partitioning run; copy whole partition folders only")


def check_graph(obj: Any, meta: PartitionMeta, part: int, path: Path,
                deep: bool = True) -> PartitionGraph:
    """Checks a loaded ``graph.pt`` of partition ``part``.

    Args:
        deep (bool): also check every source id (a pass over all edges). A mapped
            store skips it to open in constant time; its samplers check the ids they
            read instead (cheaply, per sampled edge), so a bad id still raises naming
            the file rather than crashing. Everything node-sized (``indptr``, halo) is
            always checked, which keeps every read of ``indices`` in bounds.

    Raises:
        PartitionFormatError: naming ``path`` and the problem.
    """
    c = _Checker(path, meta, part)
    obj = c.dict(obj, "graph.pt content", keys=("csc",))
    check_uid(path, obj.get("uid"), meta)
    csc = c.dict(obj["csc"], "csc")
    for key in csc:
        c.edge_type(key, "csc")
    out = PartitionGraph({}, {}, {})
    for edge_type in meta.edge_types:
        entry = csc.get(edge_key(edge_type))
        if entry is None:
            c.fail(f"csc has no edges of type {edge_key(edge_type)} listed in META.json")
        out.csc[edge_type] = _check_csc(c, entry, edge_type, deep)
    halo = c.dict(obj.get("halo", {}), "halo")
    for node_type, ids in halo.items():
        c.node_type(node_type, "halo")
        out.halo[node_type] = _check_halo(c, ids, node_type)
    for edge_type, (_, indices) in out.csc.items() if deep else ():
        _check_covered(c, indices, edge_type, out.halo.get(edge_type[0]))
    halo_attrs = c.dict(obj.get("halo_attrs", {}), "halo_attrs")
    for node_type, attrs in halo_attrs.items():
        c.node_type(node_type, "halo_attrs")
        rows = out.halo[node_type].numel() if node_type in out.halo else 0
        out.halo_attrs[node_type] = c.attrs(attrs, f"halo_attrs of node type '{node_type}'",
                                            meta.node_attrs.get(node_type, {}), rows,
                                            exact=False)
    return out


def _check_csc(c: _Checker, entry: Any, edge_type: EdgeType,
               deep: bool) -> Tuple[Tensor, Tensor]:
    what = f"csc[{edge_key(edge_type)!r}]"
    if not isinstance(entry, dict):
        c.fail(f"{what} must be a dict with 'indptr' and 'indices', got {type(entry).__name__}")
    c.dict(entry, what, keys=("indptr", "indices"))
    lo, hi = c.owned(edge_type[2])
    e_lo, e_hi = c.meta.edge_offsets[edge_type][c.part], c.meta.edge_offsets[edge_type][c.part + 1]
    indptr = c.tensor(entry["indptr"], f"{what} indptr", _LONG, rows=hi - lo + 1, dim=1)
    indices = c.tensor(entry["indices"], f"{what} indices", _INDEX, rows=e_hi - e_lo, dim=1)
    if int(indptr[0]) != 0:
        c.fail(f"{what} indptr must start at 0, got {int(indptr[0])}")
    drops = torch.nonzero(indptr[1:] < indptr[:-1])
    if drops.numel():
        c.fail(f"{what} indptr must be non-decreasing; it decreases after position "
               f"{int(drops[0])}")
    if int(indptr[-1]) != indices.numel():
        c.fail(f"{what} indptr ends at {int(indptr[-1])}, expected the edge count "
               f"{indices.numel()}")
    if deep:
        c.in_range(indices, 0, c.meta.num_nodes[edge_type[0]],
                   f"{what} indices (source ids of node type '{edge_type[0]}')")
    return indptr, indices


def _check_halo(c: _Checker, ids: Any, node_type: NodeType) -> Tensor:
    what = f"halo ids of node type '{node_type}'"
    ids = c.tensor(ids, what, _LONG, dim=1)
    if ids.numel() > 1 and bool((ids[1:] <= ids[:-1]).any()):
        c.fail(f"{what} must be sorted and unique")
    c.in_range(ids, 0, c.meta.num_nodes[node_type], what)
    lo, hi = c.owned(node_type)
    if ids.numel() and bool(((ids >= lo) & (ids < hi)).any()):
        c.fail(f"{what} include ids partition {c.part} owns ([{lo}, {hi}))")
    return ids


def _check_covered(c: _Checker, indices: Tensor, edge_type: EdgeType,
                   halo: Optional[Tensor]) -> None:
    """Every source owned elsewhere is a halo node (temporal sampling looks them up)."""
    lo, hi = c.owned(edge_type[0])
    outside = indices[(indices < lo) | (indices >= hi)].long()
    if outside.numel() == 0:
        return
    halo = torch.empty(0, dtype=torch.long) if halo is None else halo
    pos = torch.searchsorted(halo, outside).clamp_(max=max(halo.numel() - 1, 0))
    missing = outside[halo[pos] != outside] if halo.numel() else outside
    if missing.numel():
        c.fail(f"halo ids of node type '{edge_type[0]}' miss sources of edge type "
               f"{edge_key(edge_type)} owned by other partitions (e.g. {int(missing[0])})")


def check_node_feats(obj: Any, meta: PartitionMeta, part: int,
                     path: Path) -> Dict[NodeType, Dict[str, Tensor]]:
    """Checks a loaded ``node_feats.pt``: per node type, one row per owned node."""
    c = _Checker(path, meta, part)
    out = {}
    for node_type, attrs in c.dict(obj, "node_feats.pt content").items():
        what = f"node type '{c.node_type(node_type, 'node_feats.pt')}'"
        lo, hi = c.owned(node_type)
        out[node_type] = c.attrs(attrs, what, meta.node_attrs.get(node_type, {}), hi - lo)
    for node_type, specs in meta.node_attrs.items():
        if specs and node_type not in out:
            c.fail(f"node type '{node_type}' has no attributes, META.json lists {sorted(specs)}")
    return out


def check_edge_feats(obj: Any, meta: PartitionMeta, part: int,
                     path: Path) -> Dict[EdgeType, Dict[str, Tensor]]:
    """Checks a loaded ``edge_feats.pt``: per edge type, one row per owned edge."""
    c = _Checker(path, meta, part)
    out = {}
    for key, attrs in c.dict(obj, "edge_feats.pt content").items():
        edge_type = c.edge_type(key, "edge_feats.pt")
        offsets = meta.edge_offsets[edge_type]
        out[edge_type] = c.attrs(attrs, f"edge type {key}", meta.edge_attrs.get(edge_type, {}),
                                 offsets[part + 1] - offsets[part])
    for edge_type, specs in meta.edge_attrs.items():
        if specs and edge_type not in out:
            c.fail(f"edge type {edge_key(edge_type)} has no attributes, META.json lists "
                   f"{sorted(specs)}")
    return out


def check_splits(obj: Any, meta: PartitionMeta, part: int,
                 path: Path) -> Dict[NodeType, Dict[str, Tensor]]:
    """Checks a loaded ``splits.pt``: per node type and split, owned global ids."""
    c = _Checker(path, meta, part)
    out: Dict[NodeType, Dict[str, Tensor]] = {}
    for node_type, splits in c.dict(obj, "splits.pt content").items():
        c.node_type(node_type, "splits.pt")
        lo, hi = c.owned(node_type)
        out[node_type] = {}
        for name, ids in c.dict(splits, f"splits of node type '{node_type}'").items():
            what = f"split '{name}' of node type '{node_type}'"
            ids = out[node_type][name] = c.tensor(ids, what, _LONG, dim=1)
            if ids.numel() and not bool(((ids >= lo) & (ids < hi)).all()):
                c.fail(f"{what} holds ids outside the owned range [{lo}, {hi})")
            if ids.numel() > 1 and bool((ids[1:] <= ids[:-1]).any()):
                c.fail(f"{what} must be sorted and unique")
    return out
