"""Sampled inference: every node's output from a sampled neighbourhood, each node once.

For models that cannot be run one layer at a time. Every rank iterates a
:class:`~pyg_dist.loader.DistNeighborLoader` over the nodes whose rows it owns in
the result (its share of its partition, in id order, no shuffling, no padding
batches) and writes each batch's seed rows of ``model(batch.x, batch.edge_index)``.
On a heterogeneous graph the model is called as ``model(batch.x_dict,
batch.edge_index_dict)`` (what ``to_hetero`` models take) and every rank runs one
loader per output node type, the same types in the same order, seeded with its
share of that type's nodes; the seeds' rows are ``out[node_type][:batch_size]``.
Sampling is random (seeded by ``seed``), so the result is the same as a
single-machine ``NeighborLoader`` only where the sample is the full neighbourhood.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.embedding import DistTensor
from pyg_dist.embedding._comm import Comm
from pyg_dist.embedding._layout import rank_offsets
from pyg_dist.inference import _tensor_rows as rows
from pyg_dist.inference._sampled_types import (count_fetches, output_types, seed_rows,
                                                seeds_store)
from pyg_dist.loader import DistNeighborLoader
from pyg_dist._progress import track
from pyg_dist.rpc import DistContext
from pyg_dist.sampler._stores import unpack_stores
from pyg_dist.sampler._serving import serving_group
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist._typing import NodeType

Device = Union[str, torch.device, None]
Result = Union[DistTensor, Dict[NodeType, DistTensor]]


@dataclass
class _Options:
    """The loader options of one sampled inference run (the same on every rank)."""
    num_neighbors: List[int]
    batch_size: int
    device: Device
    num_workers: int
    seed: int
    show: bool
    ctx: DistContext


@dataclass
class _Target:
    """What one loader computes: the rows of ``node_type`` (``None``: homogeneous),
    this rank's relabelled ids ``own``, into the tensor ``name``."""
    node_type: Optional[NodeType]
    name: str
    own: Tuple[int, int]
    required: bool


@torch.no_grad()
def sampled(model: torch.nn.Module, data: Tuple[LocalFeatureStore, LocalGraphStore],
            num_neighbors: List[int], *, batch_size: int = 1024, device: Device = None,
            num_workers: int = 0, seed: int = 0, progress: Optional[bool] = None,
            ctx: Optional[DistContext] = None,
            node_types: Optional[Sequence[NodeType]] = None) -> Result:
    """Every node's output of ``model`` on sampled neighbourhoods (collective).

    Args:
        model (torch.nn.Module): called as ``model(batch.x, batch.edge_index)``; the
            first ``batch.batch_size`` rows of its output are the seeds' rows. On a
            heterogeneous graph called as ``model(batch.x_dict, batch.edge_index_dict)``
            (a ``to_hetero`` model; as in PyG's loaders, a node type with no node in
            the batch has empty attributes) and returning a dict by node type; the
            seeds of type ``t`` are the first ``batch[t].batch_size`` rows of ``out[t]``. Run in
            eval mode (restored afterwards), without autograd.
        data (tuple): ``(LocalFeatureStore, LocalGraphStore)`` of this rank's partition.
        num_neighbors (List[int]): neighbours sampled per hop, as for the loader.
        batch_size (int): seed nodes per batch.
        device (str or torch.device, optional): where batches go and the model runs.
        num_workers (int): sampler worker processes of the loader.
        seed (int): the sampling seed.
        progress (bool, optional): report batches (default: on a terminal only).
        ctx (DistContext, optional): this process's context (default: from the env).
        node_types (List[str], optional): heterogeneous graphs only: the node types
            to compute, one loader each, in this order; each must be in the model's
            output. (default: every node type with nodes and input features ``x``
            that the model's output dict contains, in the graph's order; a type the
            model does not output costs one batch to find out)

    Returns:
        DistTensor or Dict[str, DistTensor]: every node's output row, sharded like the
        graph, indexed by relabelled node id (see :mod:`pyg_dist.inference._tensor_rows`); a
        dict by node type for heterogeneous graphs.

    Raises:
        ValueError: if a ``node_types`` entry is not a node type of the graph or is
            repeated, or ``node_types`` is given for a homogeneous graph (on every rank,
            before any collective).
        TypeError: if ``node_types`` is not a list of node types, or a heterogeneous
            model does not return a dict.
        RuntimeError: if some node was not computed exactly once, or an explicitly
            requested node type is missing from the model's output.
    """
    features, graph = unpack_stores(data)
    types = output_types(graph, node_types)
    ctx = ctx or DistContext.from_env()
    if ctx.world_size > 1:
        serving_group(ctx, features, graph)
    show = sys.stderr.isatty() if progress is None else progress
    opts = _Options(num_neighbors, batch_size, device, num_workers, seed, show, ctx)
    prefix = f"{rows.run_prefix()}.sampled"
    was_training = model.training
    model.eval()
    try:
        if not graph.is_hetero:
            return _one_type(model, (features, graph), None, prefix, opts, True)
        return _every_type(model, (features, graph), types, prefix, opts,
                           node_types is not None)
    finally:
        model.train(was_training)


def _every_type(model: torch.nn.Module, data: Tuple[LocalFeatureStore, LocalGraphStore],
                types: List[NodeType], prefix: str, opts: "_Options", asked: bool
                ) -> Dict[NodeType, DistTensor]:
    """One loader per node type, in order on every rank; the types the model outputs."""
    out = {}
    for node_type in types:
        result = _one_type(model, data, node_type, f"{prefix}.{node_type}", opts, asked)
        if result is not None:
            out[node_type] = result
    return out


def _one_type(model: torch.nn.Module, data: Tuple[LocalFeatureStore, LocalGraphStore],
              node_type: Optional[NodeType], name: str, opts: _Options,
              required: bool) -> Optional[DistTensor]:
    """Every node's row of one node type (``None``: the homogeneous graph), through one
    loader over this rank's share; ``None`` where the model outputs no such node type
    on any rank (and ``required`` is False)."""
    features, graph = data
    book = graph.node_book(node_type)
    offsets = rank_offsets(book.total, opts.ctx.world_size, book)
    own = (offsets[opts.ctx.rank], offsets[opts.ctx.rank + 1])
    seeds = rows.seeds_of(features, *own, node_type=node_type)
    loader = DistNeighborLoader(data, opts.num_neighbors,
                                input_nodes=seeds if node_type is None else (node_type, seeds),
                                batch_size=opts.batch_size, shuffle=False,
                                even_batches=False, num_workers=opts.num_workers,
                                seed=opts.seed, device=opts.device, current_ctx=opts.ctx)
    label = "sampled inference" + ("" if node_type is None else f" {node_type}")
    try:
        return _run(model, loader, _Target(node_type, name, own, required), graph,
                    label, opts.show)
    finally:
        loader.close()


def _run(model: torch.nn.Module, loader: DistNeighborLoader, target: _Target,
         graph: LocalGraphStore, label: str, show: bool) -> Optional[DistTensor]:
    node_type = target.node_type
    batches = iter(track(loader, label, enabled=show, unit="batches",
                         count=("seeds", lambda b: int(seeds_store(b, node_type).batch_size))))
    first = _first(model, batches, target, label)
    width = _agree_width(first, target, label)
    if width is None:
        return None
    out = rows.node_rows(target.name, graph.node_book(node_type), width)
    start, stop = target.own
    done = torch.zeros(stop - start, dtype=torch.long)
    error: Optional[BaseException] = None
    try:
        batch, y = first
        while batch is not None:
            if y is None:
                raise RuntimeError(f"{label}: the model's output has no node type "
                                   f"{node_type!r} for some batch")
            seeds = rows.batch_seeds(seeds_store(batch, node_type))
            count_fetches(batch, graph)
            rows.write_rows(out, seeds, y)
            done.index_add_(0, seeds.cpu() - start, torch.ones(seeds.numel(), dtype=torch.long))
            batch = next(batches, None)
            y = seed_rows(model, batch, node_type) if batch is not None else None
        if not bool((done == 1).all()):
            raise RuntimeError(f"{label} computed {int((done == 0).sum())} node(s) never "
                               f"and {int((done > 1).sum())} more than once")
    except Exception as exc:  # re-raised by agree, and reported to every other rank
        error = exc
    # every rank's rows are written before anyone reads them
    Comm.current().agree(error, label)
    return out


def _first(model: torch.nn.Module, batches: Iterator, target: _Target, label: str
           ) -> Tuple[object, Optional[Tensor]]:
    """The first batch and its seed rows (``(None, None)``: no batch); a failure is
    reported on every rank."""
    error: Optional[BaseException] = None
    batch, y = None, None
    try:
        batch = next(batches, None)
        y = seed_rows(model, batch, target.node_type) if batch is not None else None
    except Exception as exc:  # re-raised by agree, and reported to every other rank
        error = exc
    Comm.current().agree(error, label)
    return batch, y


def _agree_width(first: Tuple[object, Optional[Tensor]], target: _Target,
                 label: str) -> Optional[int]:
    """The output width, agreed by every rank that had a batch (collective); ``None``
    where the model output no rows of a node type that was not required."""
    batch, y = first
    mine = None if batch is None else (-1 if y is None else int(y.shape[1]))
    dims = Comm.current().all_gather_object(mine)
    known = {d for d in dims if d is not None}
    if known == {-1}:
        if not target.required:
            return None
        raise RuntimeError(f"{label}: the model's output has no node type "
                           f"{target.node_type!r}")
    if len(known) != 1 or -1 in known:
        raise RuntimeError(f"{label}: ranks disagree on the output width (by rank: {dims}; "
                           f"-1: no such node type in the output)")
    return known.pop()
