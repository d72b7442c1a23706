"""Exact layer-wise inference over a partitioned graph.

Layer ``i`` computes the output row of every node from the previous layer's rows of
the node's full 1-hop in-neighbourhood. Each partition holds every in-edge of the
nodes it owns, so a rank computes its own nodes batch by batch: the batch's in-edges
come from its :class:`~pyg_dist.store.LocalGraphStore`, the input rows from a
``DistTensor`` sharded like the graph (own rows directly, other owners' rows in one
request per owner per batch), and the output rows go to this rank's shard of the next
``DistTensor``, which the next layer reads. A rank holds its own shard of the input and
output of one layer and one batch's subgraph; an input tensor is freed as soon as every
rank has finished the layer that read it. Ranks sharing a partition split its nodes
(the ``DistTensor`` layout gives each its own consecutive range).
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.nn.conv import GINConv, SAGEConv

from pyg_dist.embedding import DistTensor
from pyg_dist.inference import gcn, rows
from pyg_dist.inference.spec import LayerwiseSpec, NotLayerwiseError, spec_of
from pyg_dist.inference.subgraph import OneHop, one_hop, ranges
from pyg_dist.format.book import RangeBook
from pyg_dist.progress import track
from pyg_dist.rpc import DistContext
from pyg_dist.sampler.neighbor_sampler import unpack_stores
from pyg_dist.sampler.serving import serving_group
from pyg_dist.store import LocalFeatureStore, LocalGraphStore

Device = Union[str, torch.device, None]

# layers that take (source rows, destination rows) and compute destination rows only
BIPARTITE = (SAGEConv, GINConv)


@torch.no_grad()
def layerwise(model: torch.nn.Module, data: Tuple[LocalFeatureStore, LocalGraphStore], *,
              batch_size: int = 4096, device: Device = None, x_attr: str = "x",
              progress: Optional[bool] = None, ctx: Optional[DistContext] = None
              ) -> DistTensor:
    """Every node's output of ``model``, computed exactly, one layer at a time (collective).

    Equals ``model(x, edge_index)`` run full-batch on the whole graph (in eval mode).

    Args:
        model (torch.nn.Module): a PyG ``BasicGNN`` or a model with ``layerwise_spec()``
            (:mod:`pyg_dist.inference.spec`); must live on ``device``. Run in eval mode
            (its mode is restored afterwards), without autograd.
        data (tuple): ``(LocalFeatureStore, LocalGraphStore)`` of this rank's partition.
        batch_size (int): destination nodes per batch (bounds memory per process).
        device (str or torch.device, optional): where layers run (default: CPU).
        x_attr (str): the node feature attribute. (default: ``"x"``)
        progress (bool, optional): report each layer's batches (a bar on a terminal,
            plain lines otherwise); default: on a terminal only.
        ctx (DistContext, optional): this process's context (default: from torchrun's
            environment); joins the RPC group if this process has not.

    Returns:
        DistTensor: the final layer's rows of every node, sharded like the graph, indexed
        by relabelled node id (see :mod:`pyg_dist.inference.rows`).

    Raises:
        NotLayerwiseError: if the model cannot be split into layers (use sampled mode).
        NotImplementedError: for heterogeneous graphs and ``to_hetero`` models.
    """
    spec = spec_of(model)
    features, graph = unpack_stores(data)
    if graph.is_hetero:
        raise NotImplementedError("layer-wise inference on heterogeneous graphs is not "
                                  "implemented yet; use sampled inference (num_neighbors=[...])")
    device = torch.device(device) if device is not None else torch.device("cpu")
    _check_device(model, device)
    ctx = ctx or DistContext.from_env()
    if ctx.world_size > 1:
        serving_group(ctx, features, graph)
    book = graph.node_book()
    csc = next(iter(graph.csc_by_type.values()))
    prefix = rows.run_prefix()
    was_training = model.training
    model.eval()
    try:
        h = rows.node_rows(f"{prefix}.x", book, _feature_dim(features, x_attr),
                           fill=lambda lo, hi: features.gather(features.resolve(None), x_attr,
                                                               torch.arange(lo, hi)))
        degrees = _degrees(spec, csc, book, prefix, batch_size)
        show = sys.stderr.isatty() if progress is None else progress
        for i, layer in enumerate(spec.layers):
            out = rows.node_rows(f"{prefix}.layer{i}", book, _out_dim(spec, i, h, device))
            _run_layer(spec, i, h, out, csc, degrees.get(gcn.norm_of(layer)), batch_size,
                       device, show)
            rows.release(h)  # every rank passed the barrier after its last read of h
            h = out
        for degree in degrees.values():
            rows.release(degree)
    finally:
        model.train(was_training)
    return h


def _run_layer(spec: LayerwiseSpec, i: int, h: DistTensor, out: DistTensor, csc,
               degrees: Optional[DistTensor], batch_size: int, device: torch.device,
               show: bool) -> None:
    """Computes this rank's rows of layer ``i`` into ``out``; ends with a barrier that
    reports any rank's failure on every rank."""
    error: Optional[BaseException] = None
    start, stop = rows.own_range(out)
    pieces = list(ranges(start, stop, batch_size))
    try:
        for lo, hi in track(pieces, f"layer {i + 1}/{len(spec.layers)}", enabled=show,
                            unit="batches", count=("nodes", lambda piece: piece[1] - piece[0])):
            hop = one_hop(csc, lo, hi)
            y = _layer_batch(spec, i, h, hop, degrees, device)
            if tuple(y.shape) != (hi - lo, out.shape[1]):
                raise NotLayerwiseError(
                    f"layer {i} ({type(spec.layers[i]).__name__}) returned rows of shape "
                    f"{tuple(y.shape)} for {hi - lo} nodes, expected width {out.shape[1]}")
            rows.write_own_rows(out, lo, y.to("cpu", torch.float32))
    except Exception as exc:  # re-raised by agree, and reported to every other rank
        error = exc
    out.comm.agree(error, f"layer-wise inference, layer {i}")


def _layer_batch(spec: LayerwiseSpec, i: int, h: DistTensor, hop: OneHop,
                 degrees: Optional[DistTensor], device: torch.device) -> Tensor:
    """Layer ``i`` (and what runs after it) on one batch's subgraph: the output rows of
    its destinations."""
    layer = spec.layers[i]
    x = rows.read_rows(h, hop.n_id).to(device)
    norm = gcn.norm_of(layer)
    if norm is None and isinstance(layer, BIPARTITE):  # only the destinations' rows
        y = layer((x, x[:hop.num_dst]), hop.edge_index.to(device),
                  size=(x.size(0), hop.num_dst))
    elif norm is None:
        y = layer(x, hop.edge_index.to(device))
    else:
        assert degrees is not None
        edge_index, weight = gcn.normalized(hop, rows.read_rows(degrees, hop.n_id).view(-1),
                                            norm)
        with gcn.normalize_off(layer):
            y = layer(x, edge_index.to(device), weight.to(device))
    return spec.apply_after(i, y[:hop.num_dst])


def _degrees(spec: LayerwiseSpec, csc, book: RangeBook, prefix: str,
             batch_size: int) -> Dict[Tuple[float, bool], DistTensor]:
    """Whole-graph degrees for every normalisation the model's ``GCNConv`` layers use."""
    out: Dict[Tuple[float, bool], DistTensor] = {}
    norms = {gcn.norm_of(layer) for layer in spec.layers} - {None}
    for k, norm in enumerate(sorted(norms)):
        out[norm] = rows.node_rows(
            f"{prefix}.degree{k}", book, 1,
            fill=lambda lo, hi, n=norm: torch.cat(
                [gcn.node_degrees(one_hop(csc, a, b), n)
                 for a, b in ranges(lo, hi, batch_size)]).view(-1, 1))
    return out


def _out_dim(spec: LayerwiseSpec, i: int, h: DistTensor, device: torch.device) -> int:
    """The width of layer ``i``'s output rows, from a two-node probe graph (every rank
    gets the same answer without asking the others)."""
    layer = spec.layers[i]
    x = torch.zeros(2, h.shape[1], device=device)
    edge_index = torch.tensor([[1, 0], [0, 1]], device=device)
    try:
        if gcn.norm_of(layer) is None:
            y = layer(x, edge_index)
        else:
            with gcn.normalize_off(layer):
                y = layer(x, edge_index, torch.ones(2, device=device))
        y = spec.apply_after(i, y)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise NotLayerwiseError(f"layer {i} ({type(layer).__name__}) cannot run as "
                                f"layer(x, edge_index) on rows of width {h.shape[1]}: "
                                f"{exc}") from exc
    if not isinstance(y, Tensor) or y.dim() != 2:
        raise NotLayerwiseError(f"layer {i} ({type(layer).__name__}) must return a 2-D "
                                f"tensor of node rows")
    return int(y.shape[1])


def _feature_dim(features: LocalFeatureStore, x_attr: str) -> int:
    sizes: List[int] = [int(s) for s in features.get_tensor_size(None, x_attr)]
    if len(sizes) != 2:
        raise ValueError(f"node attribute '{x_attr}' must be a 2-D feature matrix, got "
                         f"shape {tuple(sizes)}")
    return sizes[1]


def _check_device(model: torch.nn.Module, device: torch.device) -> None:
    param = next(iter(model.parameters()), None)
    if param is not None and param.device.type != device.type:
        raise ValueError(f"the model's parameters are on {param.device} but device={device}: "
                         f"move the model with model.to(device) first")
