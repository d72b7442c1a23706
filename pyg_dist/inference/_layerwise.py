"""Exact layer-wise inference over a partitioned graph, homogeneous or heterogeneous.

The model is a list of stages (:mod:`pyg_dist.inference._plan`): one per message-passing
layer, over node and edge types (a homogeneous graph has one of each). Stage ``i``
computes the output row of every node of the types it updates from the previous
stage's rows of the node's full 1-hop in-neighbourhood, per edge type. Each partition
holds every in-edge of the nodes it owns, so a rank computes its own nodes batch by
batch: the batch's in-edges come from its :class:`~pyg_dist.store.LocalGraphStore`,
the input rows from the node features (first stage: the feature store and the
sampler's feature fetcher, with direct reads of same-machine partitions) or from a
``DistTensor`` per node type sharded like the graph (own rows directly, other owners'
rows in one request per owner per batch), and the output rows go to this rank's shard
of the next ``DistTensor``, which the next stage reads. A rank holds its own shard of
the input and output of one stage and one batch's subgraph; an input tensor is freed as
soon as every rank has finished the stage that read it; with ``scratch_dir`` the
shards live in mapped files there (hidden states larger than memory). Ranks sharing a
partition split its nodes (the ``DistTensor`` layout gives each its own consecutive
range).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.embedding import DistTensor
from pyg_dist.embedding._comm import Comm
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.inference import _gcn as gcn, _tensor_rows as rows
from pyg_dist.inference._batch import Inputs, probe_width, stage_batch
from pyg_dist.inference._plan import plan_of
from pyg_dist.inference._spec import NotLayerwiseError
from pyg_dist.inference._stage import Plan, Stage
from pyg_dist.inference._subgraph import OneHop, one_hop, ranges
from pyg_dist._progress import track
from pyg_dist.rpc import DistContext
from pyg_dist.sampler._stores import unpack_stores
from pyg_dist.sampler._serving import serving_group
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist._typing import EdgeType, NodeType

Device = Union[str, torch.device, None]
Result = Union[DistTensor, Dict[NodeType, DistTensor]]
DegreeKey = Tuple[EdgeType, Tuple[float, bool]]


@torch.no_grad()
def layerwise(model: torch.nn.Module, data: Tuple[LocalFeatureStore, LocalGraphStore], *,
              batch_size: int = 4096, device: Device = None, x_attr: str = "x",
              progress: Optional[bool] = None, ctx: Optional[DistContext] = None,
              scratch_dir: Optional[Union[str, Path]] = None) -> Result:
    """Every node's output of ``model``, computed exactly, one layer at a time (collective).

    Equals ``model(x, edge_index)`` run full-batch on the whole graph (in eval mode), and
    for a ``to_hetero`` model ``model(x_dict, edge_index_dict)`` on the ``HeteroData``.

    Args:
        model (torch.nn.Module): a PyG ``BasicGNN``, a ``to_hetero`` model, or a model
            with ``layerwise_spec()`` (:mod:`pyg_dist.inference._spec`); must live on
            ``device``. Run in eval mode (its mode is restored afterwards), without
            autograd.
        data (tuple): ``(LocalFeatureStore, LocalGraphStore)`` of this rank's partition.
        batch_size (int): destination nodes per batch (bounds memory per process).
        device (str or torch.device, optional): where layers run (default: CPU).
        x_attr (str): the node feature attribute. (default: ``"x"``)
        progress (bool, optional): report each layer's batches (a bar on a terminal,
            plain lines otherwise); default: on a terminal only.
        ctx (DistContext, optional): this process's context (default: from torchrun's
            environment); joins the RPC group if this process has not.
        scratch_dir (str or Path, optional): keep the hidden states in mapped files in
            this (local, existing) folder instead of memory, for hidden states larger
            than memory; each file is removed when its rows are no longer read (the
            result's when the process exits).

    Returns:
        DistTensor or Dict[str, DistTensor]: the final layer's rows of every node,
        sharded like the graph, indexed by relabelled node id (see
        :mod:`pyg_dist.inference._tensor_rows`); a dict by node type for heterogeneous graphs.

    Raises:
        NotLayerwiseError: if the model cannot be split into layers (use sampled mode).
    """
    features, graph = unpack_stores(data)
    plan = plan_of(model, graph.meta)
    device = torch.device(device) if device is not None else torch.device("cpu")
    _check_device(model, device)
    ctx = ctx or DistContext.from_env()
    serving = serving_group(ctx, features, graph) if ctx.world_size > 1 else None
    inputs = rows.FeatureRows(features, x_attr, serving)
    if not inputs.widths:
        raise ValueError(f"no node type has the feature attribute '{x_attr}'")
    was_training = model.training
    model.eval()
    try:
        return _run_plan(plan, inputs, graph, batch_size, device, progress,
                         rows.Scratch(scratch_dir))
    finally:
        model.train(was_training)


def _run_plan(plan: Plan, features: rows.FeatureRows, graph: LocalGraphStore, batch_size: int,
              device: torch.device, progress: Optional[bool], scratch: "rows.Scratch"
              ) -> Result:
    meta: PartitionMeta = graph.meta
    prefix = rows.run_prefix()
    degrees = _degrees(plan, graph, prefix, batch_size)
    current: Dict[NodeType, DistTensor] = {}

    def read(node_type: NodeType, ids: Tensor) -> Optional[Tensor]:
        if node_type in current:
            return rows.read_rows(current[node_type], ids)
        return features.read(node_type, ids)

    def hop(edge_type: EdgeType, start: int, stop: int) -> OneHop:
        return one_hop(graph.csc_by_type[edge_type], start, stop,
                       same_type=edge_type[0] == edge_type[2])

    inputs = Inputs(read, hop, lambda et, norm, ids: rows.read_rows(degrees[(et, norm)], ids),
                    device)
    show = sys.stderr.isatty() if progress is None else progress
    last: Dict[NodeType, DistTensor] = {}
    for k, stage in enumerate(plan.stages):
        widths = {**features.widths, **{t: int(x.shape[1]) for t, x in current.items()}}
        last = {}
        for t in stage.node_types:
            width = probe_width(stage, t, widths, device)
            if width is not None:
                last[t] = scratch.node_rows(f"{prefix}.{k}.{t}", meta.node_book(t), width)
        where = f"{stage.name} ({k + 1}/{len(plan.stages)})"
        _run_stage(stage, last, inputs, batch_size, where, show,
                   lambda: _after_batch(scratch, [*current.values(), *last.values()],
                                        features))
        for t in last:  # every rank passed the barrier after its last read
            if t in current:
                scratch.release(current.pop(t))
        current.update(last)
    for t in [t for t in current if t not in last]:
        scratch.release(current.pop(t))
    for degree in degrees.values():
        rows.release(degree)
    if plan.hetero:
        return last
    return last[meta.node_types[0]]


def _after_batch(scratch: "rows.Scratch", tensors: List[DistTensor],
                 features: rows.FeatureRows) -> None:
    """What a batch leaves resident goes: mapped hidden states and the mapped feature
    pages it read (memory per process bounded by a batch, not by the partition)."""
    scratch.after_batch(tensors)
    features.after_batch()


def _run_stage(stage: Stage, outs: Dict[NodeType, DistTensor], inputs: Inputs,
               batch_size: int, where: str, show: bool, after_batch: Callable[[], None]
               ) -> None:
    """Computes this rank's rows of every node type of ``stage`` into ``outs``; ends
    with a barrier that reports any rank's failure on every rank."""
    error: Optional[BaseException] = None
    try:
        for node_type, out in outs.items():
            start, stop = rows.own_range(out)
            label = where if len(outs) == 1 else f"{where} {node_type}"
            for lo, hi in track(list(ranges(start, stop, batch_size)), label, enabled=show,
                                unit="batches", count=("nodes", lambda piece: piece[1] - piece[0])):
                y = stage_batch(stage, node_type, lo, hi, inputs)
                if not isinstance(y, Tensor) or tuple(y.shape) != (hi - lo, out.shape[1]):
                    got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
                    raise NotLayerwiseError(
                        f"{stage.name} returned rows of shape {got} for {hi - lo} nodes of "
                        f"{node_type!r}, expected width {out.shape[1]}")
                rows.write_own_rows(out, lo, y.to("cpu", torch.float32))
                after_batch()
    except Exception as exc:  # re-raised by agree, and reported to every other rank
        error = exc
    Comm.current().agree(error, f"layer-wise inference, {where}")


def _degrees(plan: Plan, graph: LocalGraphStore, prefix: str,
             batch_size: int) -> Dict[DegreeKey, DistTensor]:
    """Whole-graph degrees for every (edge type, normalisation) of the model's
    normalising ``GCNConv`` layers."""
    keys = sorted({(et, gcn.norm_of(conv)) for stage in plan.stages
                   for et, conv in stage.convs.items() if gcn.norm_of(conv) is not None})
    out: Dict[DegreeKey, DistTensor] = {}
    for k, (edge_type, norm) in enumerate(keys):
        if edge_type[0] != edge_type[2]:
            raise NotLayerwiseError(f"GCNConv with normalize=True on edge type {edge_type} "
                                    f"between two node types is not supported")
        csc = graph.csc_by_type[edge_type]
        out[(edge_type, norm)] = rows.node_rows(
            f"{prefix}.degree{k}", graph.node_book(edge_type[2]), 1,
            fill=lambda lo, hi, c=csc, n=norm: torch.cat(
                [gcn.node_degrees(one_hop(c, a, b), n)
                 for a, b in ranges(lo, hi, batch_size)]).view(-1, 1))
    return out


def _check_device(model: torch.nn.Module, device: torch.device) -> None:
    param = next(iter(model.parameters()), None)
    if param is not None and param.device.type != device.type:
        raise ValueError(f"the model's parameters are on {param.device} but device={device}: "
                         f"move the model with model.to(device) first")
