"""Translating the user's original ids to relabelled ids and back, in one collective.

The rule and the per-partition tables are in :mod:`pyg_dist.store._original_ids`. Here, ids a
rank holds that its own partition cannot answer (seeds owned elsewhere, halo sources
of ``edge_split``) are asked of every partition at once:

1. each rank answers what its own partition owns (a chunked scan of its mapped ids);
2. the rest (distinct, per node type) is gathered on every rank (``all_gather``), the
   first rank of each partition answers what its partition owns, and one ``all_reduce``
   (max over ``-1`` = "not mine") gives every rank every answer.

Memory is O(ids asked) plus one chunk of the partition's mapped table: no whole-graph
table exists anywhere, and a machine holds only the mapped ``node_ids.pt`` of its
partitions (8 bytes per owned node, shared by its processes through the page cache).
Every rank sees the same answers, so an unknown id raises the same error on every
rank. With one rank (standalone), every partition of the folder is scanned.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._context import DistContext
from pyg_dist.rpc._process_group import ensure_process_group
from pyg_dist.store._original_ids import PartIds
from pyg_dist._typing import NodeType


def gather_all(values: Tensor, world_size: int, group: Optional[object]) -> List[Tensor]:
    """All ranks' tensors (any length along dim -1), in rank order (a collective)."""
    n = torch.tensor([values.size(-1)])
    sizes = [torch.zeros_like(n) for _ in range(world_size)]
    dist.all_gather(sizes, n, group=group)
    width = int(max(s.item() for s in sizes))
    padded = torch.zeros((*values.shape[:-1], width), dtype=values.dtype)
    padded[..., :values.size(-1)] = values
    out = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(out, padded, group=group)
    return [o[..., :int(s.item())] for o, s in zip(out, sizes)]


def cpu_group(ctx: DistContext) -> Optional[object]:
    """The gloo group of pyg_dist's collectives (initialising the process group if needed)."""
    if runtime.is_initialized():
        return runtime.current().cpu_group
    return ensure_process_group(ctx)


def _ask_all(asked: Tensor, answer: Callable[[Tensor], Tensor], ctx: DistContext,
             answers_here: bool) -> Tensor:
    """``asked`` on this rank answered by every partition (collective): distinct sorted
    ids of all ranks, each partition's first rank answering, max-reduced."""
    group = cpu_group(ctx)
    everything = torch.unique(torch.cat(gather_all(asked, ctx.world_size, group)))
    got = answer(everything) if answers_here else torch.full_like(everything, -1)
    dist.all_reduce(got, op=dist.ReduceOp.MAX, group=group)
    if asked.numel() == 0:
        return got[:0]
    return got[torch.searchsorted(everything, asked)]


def _first_of_partition(ctx: DistContext, num_parts: int) -> bool:
    part = ctx.partition_id(num_parts)
    return ctx.ranks_of(part, num_parts)[0] == ctx.rank


def to_relabelled(ids: Dict[NodeType, Tensor], table: PartIds, ctx: DistContext,
                  name: str) -> Dict[NodeType, Tensor]:
    """Relabelled ids of original node ids (in range, per node type); collective when the
    job has several ranks (every rank calls it with its own ids, maybe none).

    Raises:
        ValueError: naming ``name``, on every rank, if some original id is not in any
            partition (a damaged folder: every id in range is owned by one).
    """
    meta = table.meta
    out: Dict[NodeType, Tensor] = {}
    for node_type in meta.node_types:  # the same order on every rank
        mine = ids.get(node_type, torch.empty(0, dtype=torch.long)).long()
        uniq, inverse = torch.unique(mine, return_inverse=True)
        found = table.find(node_type, uniq)
        missing = found < 0
        if ctx.world_size > 1:
            found[missing] = _ask_all(uniq[missing], lambda q: table.find(node_type, q), ctx,
                                      _first_of_partition(ctx, meta.num_parts))
        else:
            for part in range(meta.num_parts):
                if part != table.part and bool((found < 0).any()):
                    other = PartIds(table.root, meta, part)
                    lost = found < 0
                    found[lost] = other.find(node_type, uniq[lost])
        if bool((found < 0).any()):
            bad = uniq[found < 0][:5].tolist()
            raise ValueError(f"{name}: original ids {bad} of node type '{node_type}' are in "
                             f"no partition of {table.root}")
        if node_type in ids:
            out[node_type] = found[inverse]
    return out


def to_original(ids: Dict[NodeType, Tensor], table: PartIds, ctx: DistContext
                ) -> Dict[NodeType, Tensor]:
    """Original ids of relabelled node ids (in range, per node type); collective when the
    job has several ranks, as :func:`to_relabelled`."""
    meta = table.meta
    out: Dict[NodeType, Tensor] = {}
    for node_type in meta.node_types:
        mine = ids.get(node_type, torch.empty(0, dtype=torch.long)).long()
        book = meta.node_book(node_type)
        result = torch.full_like(mine, -1)
        owned = book.owns(table.part, mine)
        result[owned] = table.original("node", node_type, mine[owned])

        def answer(q: Tensor, t: NodeType = node_type, part: int = table.part) -> Tensor:
            got, here = torch.full_like(q, -1), book.owns(part, q)
            got[here] = PartIds(table.root, meta, part).original("node", t, q[here])
            return got

        if ctx.world_size > 1:
            result[~owned] = _ask_all(mine[~owned], answer, ctx,
                                      _first_of_partition(ctx, meta.num_parts))
        else:
            for part in range(meta.num_parts):
                lost = result < 0
                if part != table.part and bool(lost.any()):
                    result[lost] = answer(mine[lost], node_type, part)
        if node_type in ids:
            out[node_type] = result
    return out


def label_rows(labels: Tensor, original: Tensor, relabelled: Tensor, table: PartIds,
               node_type: NodeType) -> Tensor:
    """``y`` of sampled nodes from ``feature.labels``: over all nodes (dataset order,
    indexed by original id), or over the nodes this partition owns (in the order of
    ``node_ids.pt``; nodes owned elsewhere get ``-1``, or NaN for float labels)."""
    total = table.meta.num_nodes[node_type]
    if labels.size(0) == total:
        return labels[original]
    book = table.meta.node_book(node_type)
    owned = book.owns(table.part, relabelled)
    fill = float("nan") if labels.is_floating_point() else -1
    out = torch.full((relabelled.numel(), *labels.shape[1:]), fill, dtype=labels.dtype)
    out[owned] = labels[relabelled[owned] - book.start(table.part)]
    return out


def check_labels(labels: Any, table: PartIds, node_type: NodeType) -> None:
    """Raises naming ``labels`` unless it has one row per node of ``node_type`` (dataset
    order) or per node of it this partition owns."""
    total = table.meta.num_nodes[node_type]
    local = table.meta.node_book(node_type).size(table.part)
    if not isinstance(labels, Tensor) or labels.dim() == 0 or \
            labels.size(0) not in (total, local):
        got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels (feature.labels) must have one row per node of type "
                         f"'{node_type}' in dataset order ({total}) or per node partition "
                         f"{table.part} owns ({local}), got {got}")
