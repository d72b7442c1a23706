"""What one partition answers for the whole-graph view (:class:`~pyg_dist.DistGraph`).

Two read-only RPC callees, served from the partition's mapped files (so a
same-machine peer may run them on its own mapping, :mod:`pyg_dist.sampler._direct`);
the third it uses, ``graph.find_ids`` (original -> relabelled ids), lives with the
samplers in :mod:`pyg_dist.sampler._id_lookup`:

* ``graph.degrees``: in-degrees of owned nodes (``indptr`` differences), or the
  out-degree contribution of this partition's stored edges to any nodes (edges are
  stored by destination, so every partition holds some out-edges of a node);
* ``graph.edge_ends``: relabelled ``(src, dst)`` of owned edges.

Every request comes from a peer, so it is checked before use; every answer is checked
by the caller (:func:`~pyg_dist.sampler._id_lookup.check_answer`).
"""
from __future__ import annotations

import threading
import weakref
from typing import Tuple

import torch
from torch import Tensor

from pyg_dist.rpc import callee, served
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.store import LocalGraphStore
from pyg_dist.store._original_ids import check_ids
from pyg_dist._typing import EdgeType

#: per graph store and edge type: (sorted distinct source ids, out-edges stored here)
_OUT_DEGREES: "weakref.WeakKeyDictionary[LocalGraphStore, dict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def degrees(local: LocalSampler, edge_type: EdgeType, ids: Tensor, direction: str) -> Tensor:
    """In-degrees of owned relabelled ``ids`` (``direction="in"``), or the number of
    stored edges of ``edge_type`` leaving each of ``ids`` (``"out"``, any ids)."""
    graph = local.graph
    edge_type = graph.meta.edge_type(edge_type)
    if direction == "in":
        ids = check_ids(ids, graph.meta.num_nodes[edge_type[2]], "ids")
        col = graph.node_book(edge_type[2]).to_local(graph.part, ids)
        indptr = graph.csc_by_type[edge_type].indptr
        return (indptr[col + 1] - indptr[col]).long()
    if direction != "out":
        raise ValueError(f"direction must be 'in' or 'out', got {direction!r}")
    ids = check_ids(ids, graph.meta.num_nodes[edge_type[0]], "ids")
    sources, counts = _out_table(graph, edge_type)
    out = torch.zeros(ids.numel(), dtype=torch.long)
    if sources.numel():
        pos = torch.searchsorted(sources, ids).clamp_(max=sources.numel() - 1)
        hit = sources[pos] == ids
        out[hit] = counts[pos[hit]]
    return out


def _out_table(graph: LocalGraphStore, edge_type: EdgeType) -> Tuple[Tensor, Tensor]:
    """Distinct sources of the stored edges and their counts, built once per edge type
    (16 bytes per distinct source: O(partition + halo))."""
    with _LOCK:
        tables = _OUT_DEGREES.setdefault(graph, {})
        if edge_type not in tables:
            indices = graph.csc_by_type[edge_type].indices.long()
            tables[edge_type] = torch.unique(indices, return_counts=True)
        return tables[edge_type]


def edge_ends(local: LocalSampler, edge_type: EdgeType, eids: Tensor) -> Tensor:
    """Relabelled ``(src, dst)`` of owned relabelled edge ids, as a ``(2, n)`` tensor."""
    graph = local.graph
    edge_type = graph.meta.edge_type(edge_type)
    eids = check_ids(eids, graph.meta.num_edges[edge_type], "eids")
    pos = graph.edge_book(edge_type).to_local(graph.part, eids)
    csc = graph.csc_by_type[edge_type]
    col = torch.searchsorted(csc.indptr, pos, right=True) - 1
    return torch.stack([csc.indices[pos].long(), col + csc.dst_offset])


@callee("graph.degrees", reads_partition_only=True)
def _serve_degrees(edge_type: EdgeType, ids: Tensor, direction: str) -> Tensor:
    return degrees(served("sampler"), edge_type, ids, direction)


@callee("graph.edge_ends", reads_partition_only=True)
def _serve_edge_ends(edge_type: EdgeType, eids: Tensor) -> Tensor:
    return edge_ends(served("sampler"), edge_type, eids)
