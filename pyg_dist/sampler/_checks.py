"""Checks of what peers send back, before any of it is used.

A response is checked against the request it answers and this process's schema:
the types and attributes asked for, tensors of the expected dtype, per-row shape
and row count, ids in range. A mismatch raises :class:`RemoteResponseError` naming
the peer, so a faulty or mismatched peer can never make a kernel read or write out
of bounds, nor have its bytes reinterpreted as another dtype. Every check is O(rows)
and vectorised. The inputs of the local sampling kernels are checked here too
(:func:`check_csc`, :func:`check_sample_args`).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.rpc._routing import RemoteResponseError
from pyg_dist.sampler._types import FeatureRequest, FeatureResponse, HopRequest, HopResponse
from pyg_dist._typing import EdgeType, NodeType, edge_key

Group = Union[NodeType, EdgeType]


@dataclass(frozen=True)
class RowLayout:
    """What one row of an attribute must look like.

    Args:
        shape (Tuple[int, ...]): per-row shape (the tensor's shape without its first
            dimension).
        dtype (torch.dtype): element type.
    """
    shape: Tuple[int, ...]
    dtype: torch.dtype


def _name(group: Group) -> str:
    return f"edge type {edge_key(group)}" if isinstance(group, tuple) else \
        f"node type '{group}'"


def _fail(peer: str, callee: str, what: str) -> None:
    raise RemoteResponseError(f"{peer} sent a malformed response to '{callee}': {what}")


def check_feature_response(request: FeatureRequest, response: object,
                           layouts: Mapping[Tuple[str, Group, str], RowLayout],
                           peer: str) -> None:
    """Raises :class:`RemoteResponseError` unless ``response`` answers ``request``
    exactly: the requested node and edge types, each with exactly the requested
    attributes, each a CPU tensor of ``layouts[(kind, group, attr)]`` (``kind`` is
    ``"nodes"`` or ``"edges"``) with one row per requested id.

    Args:
        request (FeatureRequest): what was asked.
        response: what came back.
        layouts: the local schema of every requested attribute.
        peer (str): the peer, as named in the error.
    """
    callee = "sampler.features"
    if not isinstance(response, FeatureResponse):
        _fail(peer, callee, f"expected a FeatureResponse, got {type(response).__name__}")
    for kind in ("nodes", "edges"):
        asked: Dict[Group, Tensor] = getattr(request, kind)
        attrs: Dict[Group, List[str]] = getattr(request, f"{kind[:-1]}_attrs")
        got = getattr(response, kind)
        if not isinstance(got, dict):
            _fail(peer, callee, f"'{kind}' is a {type(got).__name__}, not a dict")
        missing = [g for g in asked if g not in got]
        extra = [g for g in got if g not in asked]
        if missing or extra:
            _fail(peer, callee, f"{kind}: missing {missing}, unexpected {extra}")
        for group, ids in asked.items():
            rows = got[group]
            want = list(attrs.get(group, []))
            if not isinstance(rows, dict) or sorted(rows) != sorted(want):
                found = sorted(rows) if isinstance(rows, dict) else type(rows).__name__
                _fail(peer, callee, f"{_name(group)}: attributes {sorted(want)} asked, "
                                    f"{found} sent")
            for attr in want:
                _check_rows(rows[attr], ids.numel(), layouts[(kind, group, attr)],
                            peer, callee, f"{_name(group)}, attribute '{attr}'")


def check_direct_rows(column: Tensor, out: Tensor, peer: str, group: Group, attr: str,
                      ids: bool = False) -> None:
    """Raises :class:`RemoteResponseError` unless the rows of a partition read directly on
    this machine (``column``: what its owner would send) fit the output ``out``: the same
    per-row shape and dtype (``ids``: the original-id column, whose int32 files widen into
    int64). Row positions are then checked by the copy itself."""
    widens = ids and column.dtype == torch.int32 and out.dtype == torch.int64
    if (column.dtype != out.dtype and not widens) or column.dim() != out.dim() or \
            tuple(column.shape[1:]) != tuple(out.shape[1:]):
        _fail(peer, "sampler.features", f"{_name(group)}, attribute '{attr}': expected rows "
                                        f"of {out.dtype} and shape {tuple(out.shape[1:])}, "
                                        f"its files hold {column.dtype} rows of shape "
                                        f"{tuple(column.shape[1:])}")


def _check_rows(value: object, num_rows: int, layout: RowLayout, peer: str, callee: str,
                where: str) -> None:
    if not isinstance(value, Tensor):
        _fail(peer, callee, f"{where}: expected a tensor, got {type(value).__name__}")
    if value.device.type != "cpu" or value.layout != torch.strided:
        _fail(peer, callee, f"{where}: expected a dense CPU tensor, got {value.layout} "
                            f"on {value.device}")
    if value.dtype != layout.dtype or value.dim() == 0 or \
            tuple(value.shape[1:]) != tuple(layout.shape) or value.size(0) != num_rows:
        want = (num_rows, *layout.shape)
        _fail(peer, callee, f"{where}: expected {layout.dtype} of shape {want}, got "
                            f"{value.dtype} of shape {tuple(value.shape)}")


def check_hop_response(request: HopRequest, response: object,
                       num_src_nodes: Dict[NodeType, int], peer: str,
                       num_edges: Optional[Dict[EdgeType, int]] = None) -> None:
    """Raises :class:`RemoteResponseError` unless ``response`` answers ``request``:
    per edge type of the request, ``counts`` (int64, 1-D, one per seed, each in
    ``[0, fanout]`` when ``fanout >= 0``) sum to the length of ``nbrs`` and ``eids``
    (int64, 1-D); ``nbrs`` lie in ``[0, num_src_nodes[edge_type[0]])`` and ``eids``
    in ``[0, num_edges[edge_type])`` (when ``num_edges`` is given); so do
    ``original_eids``, one per edge, when the request asked for them.

    Args:
        request (HopRequest): what was asked.
        response: what came back.
        num_src_nodes: number of nodes of every node type (global id range).
        peer (str): the peer, as named in the error.
        num_edges: number of edges of every edge type (global id range).
    """
    callee = "sampler.hop"
    if not isinstance(response, HopResponse):
        _fail(peer, callee, f"expected a HopResponse, got {type(response).__name__}")
    n = len(request.edge_types)
    names = ("counts", "nbrs", "eids") + (("original_eids",) if request.original_eids else ())
    for name in names:
        value = getattr(response, name)
        if not isinstance(value, (list, tuple)) or len(value) != n:
            got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
            _fail(peer, callee, f"'{name}' must hold {n} entries (one per edge type), "
                                f"got {got}")
    for i, edge_type in enumerate(request.edge_types):
        where = f"edge type {edge_key(edge_type)}"
        counts, nbrs, eids = response.counts[i], response.nbrs[i], response.eids[i]
        for name in names:
            value = getattr(response, name)[i]
            if not isinstance(value, Tensor) or value.dtype != torch.int64 or \
                    value.dim() != 1 or value.device.type != "cpu" or \
                    value.layout != torch.strided:
                got = (f"{value.dtype} of shape {tuple(value.shape)}"
                       if isinstance(value, Tensor) else type(value).__name__)
                _fail(peer, callee, f"{where}: '{name}' must be a 1-D int64 CPU tensor, "
                                    f"got {got}")
        _check_hop_entry(request, i, counts, nbrs, eids, num_src_nodes, num_edges,
                         peer, where)
        if request.original_eids:
            _check_original_eids(response.original_eids[i], eids.numel(), num_edges,
                                 edge_type, peer, where)


def _check_original_eids(original: Tensor, count: int,
                         num_edges: Optional[Dict[EdgeType, int]], edge_type: EdgeType,
                         peer: str, where: str) -> None:
    if original.numel() != count:
        _fail(peer, "sampler.hop", f"{where}: {original.numel()} original edge ids for "
                                   f"{count} edges")
    if num_edges is not None:
        _check_range(original, num_edges[edge_type], peer, "sampler.hop",
                     f"{where}: original edge ids")


def _check_hop_entry(request: HopRequest, i: int, counts: Tensor, nbrs: Tensor,
                     eids: Tensor, num_src_nodes: Dict[NodeType, int],
                     num_edges: Optional[Dict[EdgeType, int]], peer: str,
                     where: str) -> None:
    callee, edge_type = "sampler.hop", request.edge_types[i]
    seeds, fanout = request.seeds[i].numel(), int(request.fanouts[i])
    if counts.numel() != seeds:
        _fail(peer, callee, f"{where}: {counts.numel()} counts for {seeds} seeds")
    if counts.numel():
        lo, hi = int(counts.min()), int(counts.max())
        if lo < 0 or (fanout >= 0 and hi > fanout):
            _fail(peer, callee, f"{where}: counts must lie in [0, {fanout}], got "
                                f"[{lo}, {hi}]")
    total = int(counts.sum())
    if nbrs.numel() != total or eids.numel() != total:
        _fail(peer, callee, f"{where}: counts sum to {total}, but {nbrs.numel()} "
                            f"neighbours and {eids.numel()} edge ids were sent")
    _check_range(nbrs, num_src_nodes[edge_type[0]], peer, callee,
                 f"{where}: neighbour ids")
    if num_edges is not None:
        _check_range(eids, num_edges[edge_type], peer, callee, f"{where}: edge ids")


def _check_range(ids: Tensor, total: int, peer: str, callee: str, where: str) -> None:
    if ids.numel() == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= total:
        _fail(peer, callee, f"{where} must lie in [0, {total}), got [{lo}, {hi}]")


# ---- local kernel inputs ----------------------------------------------------------------
_CSC_CHECKED: Dict[int, Tuple[weakref.ref, weakref.ref, Tuple[int, ...]]] = {}
_CSC_CHECKED_MAX = 4096


def _stamp(indptr: Tensor, indices: Tensor) -> Tuple[int, ...]:
    """Changes when either tensor is replaced, resized or modified in place by torch."""
    return (indptr._version, indices._version, indptr.data_ptr(), indices.data_ptr(),
            indptr.numel(), indices.numel())


def csc_checked(indptr: Tensor, indices: Tensor) -> bool:
    """Whether :func:`check_csc` accepted these very tensors, unchanged since."""
    entry = _CSC_CHECKED.get(id(indptr))
    return (entry is not None and entry[0]() is indptr and entry[1]() is indices
            and entry[2] == _stamp(indptr, indices))


def check_csc(indptr: Tensor, indices: Tensor) -> None:
    """Raises :class:`ValueError` unless ``indptr``/``indices`` are a CSC a sampling
    kernel can walk without leaving them: ``indptr`` 1-D int64 starting at ``0``,
    non-decreasing, ending at most at ``len(indices)``; ``indices`` 1-D int64 or int32.

    O(rows) once per pair of tensors: a pair accepted before and not modified since
    (by torch) is not checked again.
    """
    if csc_checked(indptr, indices):
        return
    if indptr.dim() != 1 or indptr.dtype != torch.int64 or indptr.numel() == 0:
        raise ValueError(f"indptr must be a non-empty 1-D int64 tensor, got {indptr.dtype} "
                         f"of shape {tuple(indptr.shape)}")
    if indices.dim() != 1 or indices.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"indices must be a 1-D int64 or int32 tensor, got {indices.dtype} "
                         f"of shape {tuple(indices.shape)}")
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0:
        raise ValueError(f"indptr[0] must be 0, got {first}")
    ptr = indptr.detach().cpu().numpy()  # numpy: ~50x faster than torch here
    if ptr.shape[0] > 1 and bool((ptr[1:] < ptr[:-1]).any()):
        bad = int((ptr[1:] < ptr[:-1]).nonzero()[0][0])
        raise ValueError(f"indptr must be non-decreasing, but indptr[{bad}] = "
                         f"{int(ptr[bad])} > indptr[{bad + 1}] = {int(ptr[bad + 1])}")
    if last > indices.numel():
        raise ValueError(f"indptr[-1] = {last} exceeds the {indices.numel()} stored edges")
    if len(_CSC_CHECKED) >= _CSC_CHECKED_MAX:
        _CSC_CHECKED.clear()
    _CSC_CHECKED[id(indptr)] = (weakref.ref(indptr), weakref.ref(indices),
                                _stamp(indptr, indices))


def check_index(rows: Tensor, size: int, what: str) -> None:
    """Raises :class:`ValueError` unless ``rows`` is a 1-D integer tensor with every
    value in ``[0, size)`` (one vectorised pass)."""
    dtype = rows.dtype
    if rows.dim() != 1 or dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise ValueError(f"{what} must be a 1-D integer tensor, got {dtype} of shape "
                         f"{tuple(rows.shape)}")
    if rows.numel():
        lo, hi = (int(v) for v in torch.aminmax(rows))
        if lo < 0 or hi >= size:
            raise ValueError(f"{what} must lie in [0, {size}), got [{lo}, {hi}]")


def check_edge_values(values: Optional[Tensor], num_edges: int) -> None:
    """Raises :class:`ValueError` unless ``values`` is ``None`` or a 1-D int64 or int32
    tensor with one value per stored edge (what a kernel reads at drawn positions)."""
    if values is not None and (values.dim() != 1
                               or values.dtype not in (torch.int64, torch.int32)
                               or values.numel() != num_edges):
        raise ValueError(f"edge_values must be a 1-D int64 or int32 tensor with one value "
                         f"per edge ({num_edges}), got {values.dtype} of shape "
                         f"{tuple(values.shape)}")


def check_values_out(out: Tensor) -> None:
    """Raises :class:`ValueError` unless ``out`` is a contiguous 1-D int64 CPU tensor (a
    buffer a kernel may write drawn values into)."""
    if not isinstance(out, Tensor) or out.dim() != 1 or out.dtype != torch.int64 or \
            not out.is_contiguous() or out.device.type != "cpu":
        raise ValueError(f"values_out must be a contiguous 1-D int64 CPU tensor, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} of shape "
                         f"{tuple(getattr(out, 'shape', ()))}")


def check_sample_args(rows: int, num_edges: int, seeds: Tensor, fanout: int,
                      weights: Optional[Tensor], edge_time: Optional[Tensor],
                      seed_time: Optional[Tensor], strategy: str) -> None:
    """Raises :class:`ValueError` unless the per-call arguments of a sampling kernel
    fit a CSC of ``rows`` rows and ``num_edges`` edges (O(seeds))."""
    check_index(seeds, rows, "seeds")
    if int(fanout) < -1:
        raise ValueError(f"fanout must be -1 (all) or >= 0, got {fanout}")
    for name, t in (("weights", weights), ("edge_time", edge_time)):
        if t is not None and t.numel() != num_edges:
            raise ValueError(f"{name} has {t.numel()} values for {num_edges} edges")
    if (edge_time is None) != (seed_time is None):
        raise ValueError("temporal sampling needs both edge_time and seed_time")
    if seed_time is not None and seed_time.numel() != seeds.numel():
        raise ValueError(f"seed_time has {seed_time.numel()} values for {seeds.numel()} seeds")
    if strategy not in ("uniform", "last"):
        raise ValueError(f"temporal_strategy must be 'uniform' or 'last', got {strategy!r}")
