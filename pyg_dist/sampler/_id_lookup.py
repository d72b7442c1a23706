"""Original -> relabelled ids of any owner, asked of the owners (no collective).

Ids this process's partition owns are looked up in its mapped id table
(:mod:`pyg_dist.store._original_ids`); the rest are asked of every other partition at once with
the read-only callee ``graph.find_ids`` (one request per partition, all in flight,
each answering for what it owns; a same-machine peer's answer may come from its
mapped files, :mod:`pyg_dist.sampler._direct`). A process serving a folder alone scans
the other partitions' tables instead. Used by the samplers' PyG interface, the
whole-graph view (:class:`~pyg_dist.DistGraph`) and graph-aligned ``DistTensor`` rows.
"""
from __future__ import annotations

from typing import Any, Tuple

import torch
from torch import Tensor

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc import callee, served
from pyg_dist.rpc._routing import RemoteResponseError, fan_out
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler import _direct as direct
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.store._original_ids import Group, PartIds, check_ids


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

    requests = [(p, direct.call_async(group, group.route(p), "graph.find_ids", kind, type_,
                                      queries))
                for p in range(meta.num_parts) if p != group.part]
    await fan_out(requests, None, take)
    return out


async def relabel(group: RpcGroup, table: PartIds, kind: str, type_: Group,
                  ids: Tensor) -> Tensor:
    """Relabelled ids of original ids ``ids`` (in range, any shape) of node or edge type
    ``type_``, whoever owns them; ``-1`` for ids no partition owns (a damaged folder:
    callers raise, naming their argument)."""
    meta = table.meta
    uniq, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
    found = table.find(type_, uniq, kind)
    missing = torch.nonzero(found < 0).view(-1)
    if missing.numel() and meta.num_parts > 1:
        if group.world_size > 1:
            found[missing] = await find_elsewhere(group, meta, kind, type_, uniq[missing])
        else:  # one process serving a folder of several partitions
            for part in range(meta.num_parts):
                lost = found < 0
                if part != table.part and bool(lost.any()):
                    other = PartIds(table.root, meta, part, table.tables)
                    found[lost] = other.find(type_, uniq[lost], kind)
    return found[inverse].view(ids.shape)


@callee("graph.find_ids", reads_partition_only=True)
def _serve_find_ids(kind: str, group: Group, queries: Tensor) -> Tensor:
    return find_ids(served("sampler"), kind, group, queries)
