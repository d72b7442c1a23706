"""What one partition answers for the whole-graph view (:class:`~pyg_dist.DistGraph`).

Three read-only RPC callees, served from the partition's mapped files (so a
same-machine peer may run them on its own mapping, :mod:`pyg_dist.sampler.direct`):

* ``graph.find_ids``: relabelled ids of original node or edge ids this partition
  owns (``-1`` for the others), from its mapped id table (:mod:`pyg_dist.store.ids`);
* ``graph.degrees``: in-degrees of owned nodes (``indptr`` differences), or the
  out-degree contribution of this partition's stored edges to any nodes (edges are
  stored by destination, so every partition holds some out-edges of a node);
* ``graph.edge_ends``: relabelled ``(src, dst)`` of owned edges.

Every request comes from a peer, so it is checked before use; every answer is checked
by the caller (:func:`check_answer`).
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Tuple

import torch
from torch import Tensor

from pyg_dist.rpc import callee, served
from pyg_dist.format.meta import PartitionMeta
from pyg_dist.rpc.routing import RemoteResponseError, fan_out
from pyg_dist.rpc.runtime import RpcGroup
from pyg_dist.sampler.local import LocalSampler
from pyg_dist.store import LocalGraphStore
from pyg_dist.store.ids import Group, check_ids
from pyg_dist.typing import EdgeType

#: per graph store and edge type: (sorted distinct source ids, out-edges stored here)
_OUT_DEGREES: "weakref.WeakKeyDictionary[LocalGraphStore, dict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def find_ids(local: LocalSampler, kind: str, group: Group, queries: Tensor) -> Tensor:
    """Relabelled ids of the original ids ``queries`` (sorted, distinct) that the
    partition of ``local`` owns, ``-1`` for the others."""
    meta = local.graph.meta
    if kind not in ("node", "edge"):
        raise ValueError(f"kind must be 'node' or 'edge', got {kind!r}")
    group = meta.node_type(group) if kind == "node" else meta.edge_type(group)
    total = meta.num_nodes[group] if kind == "node" else meta.num_edges[group]
    queries = check_ids(queries, total, "queries")
    if queries.numel() > 1 and not bool((queries[1:] > queries[:-1]).all()):
        raise ValueError("queries must be sorted and distinct")
    return local.ids.find(group, queries, kind)


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


def check_answer(answer: Any, shape: Tuple[int, ...], lo: int, hi: int, what: str) -> Tensor:
    """A peer's answer must be an int64 tensor of ``shape`` with values in ``[lo, hi)``.

    Raises:
        RemoteResponseError: naming ``what`` (the callee and the peer).
    """
    if not isinstance(answer, Tensor) or answer.dtype != torch.int64 or \
            tuple(answer.shape) != shape:
        got = (f"{answer.dtype} {tuple(answer.shape)}" if isinstance(answer, Tensor)
               else type(answer).__name__)
        raise RemoteResponseError(f"{what} answered {got}, expected int64 {shape}")
    if answer.numel() and (int(answer.min()) < lo or int(answer.max()) >= hi):
        raise RemoteResponseError(f"{what} answered values outside [{lo}, {hi})")
    return answer


async def find_elsewhere(group: RpcGroup, meta: PartitionMeta, kind: str, type_: Group,
                         queries: Tensor) -> Tensor:
    """Relabelled ids of original ids ``queries`` (sorted, distinct) owned by partitions
    other than this rank's, ``-1`` where none owns one: ``graph.find_ids`` to every
    other partition, all in flight, each answer checked (values it owns, or ``-1``)."""
    book = meta.node_book(type_) if kind == "node" else meta.edge_book(type_)
    out = torch.full_like(queries, -1)

    def take(part: int, got: Any) -> None:
        where = f"'graph.find_ids' on partition {part}"
        got = check_answer(got, tuple(queries.shape), -1, book.total, where)
        if not bool(book.owns(part, got[got >= 0]).all()):
            raise RemoteResponseError(f"{where} answered ids it does not own")
        torch.maximum(out, got, out=out)

    requests = [(p, group.call_async(group.route(p), "graph.find_ids", kind, type_, queries))
                for p in range(meta.num_parts) if p != group.part]
    await fan_out(requests, None, take)
    return out


@callee("graph.find_ids", reads_partition_only=True)
def _serve_find_ids(kind: str, group: Group, queries: Tensor) -> Tensor:
    return find_ids(served("sampler"), kind, group, queries)


@callee("graph.degrees", reads_partition_only=True)
def _serve_degrees(edge_type: EdgeType, ids: Tensor, direction: str) -> Tensor:
    return degrees(served("sampler"), edge_type, ids, direction)


@callee("graph.edge_ends", reads_partition_only=True)
def _serve_edge_ends(edge_type: EdgeType, eids: Tensor) -> Tensor:
    return edge_ends(served("sampler"), edge_type, eids)
