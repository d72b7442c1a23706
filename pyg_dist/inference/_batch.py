"""One stage of a layer-wise plan on one batch of destination nodes of one type.

:func:`stage_batch` reads the batch's rows (:class:`Inputs`), runs the stage's module of
every edge type into the node type on the batch's in-edges (:func:`run_conv`) and
combines their outputs (:attr:`Stage.combine`). :func:`probe_width` runs the same code
on a two-node graph to learn a stage's output width without touching the graph.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.nn.conv import GINConv, SAGEConv

from pyg_dist.inference import _gcn as gcn
from pyg_dist.inference._spec import SAMPLED_HINT, NotLayerwiseError
from pyg_dist.inference._stage import Stage
from pyg_dist.inference._subgraph import OneHop
from pyg_dist._typing import EdgeType, NodeType

# layers that take (source rows, destination rows) and compute destination rows only
BIPARTITE = (SAGEConv, GINConv)

# read(node_type, relabelled ids) -> rows (None: the type has no rows)
ReadRows = Callable[[NodeType, Tensor], Optional[Tensor]]
# hop(edge_type, start, stop) -> the in-edges of destinations [start, stop)
HopOf = Callable[[EdgeType, int, int], OneHop]
# degrees(edge_type, norm, relabelled ids) -> whole-graph degrees (GCN normalisation)
DegreesOf = Callable[[EdgeType, gcn.Norm, Tensor], Tensor]


@dataclass
class Inputs:
    """Where a stage's batch gets its rows, edges and degrees (see the type aliases)."""
    read: ReadRows
    hop: HopOf
    degrees: DegreesOf
    device: torch.device


def stage_batch(stage: Stage, node_type: NodeType, start: int, stop: int,
                inputs: Inputs) -> Optional[Tensor]:
    """The stage's output rows of destinations ``[start, stop)`` of ``node_type``."""
    x_dst, outputs = conv_outputs(stage, node_type, start, stop, inputs)
    return stage.combine(node_type, x_dst, outputs)


def conv_outputs(stage: Stage, node_type: NodeType, start: int, stop: int, inputs: Inputs
                 ) -> Tuple[Optional[Tensor], Dict[EdgeType, Tensor]]:
    """The destinations' input rows and the output of every edge type into them."""
    outputs: Dict[EdgeType, Tensor] = {}
    x_dst: Optional[Tensor] = None
    for edge_type in stage.edge_types_into(node_type):
        hop = inputs.hop(edge_type, start, stop)
        x_src = _rows(inputs, edge_type[0], hop.n_id)
        if hop.dst_first:
            x_dst = x_src[:hop.num_dst]
        elif x_dst is None:
            x_dst = _rows(inputs, node_type, torch.arange(start, stop), missing_ok=True)
        norm = gcn.norm_of(stage.convs[edge_type])
        degrees = None if norm is None else inputs.degrees(edge_type, norm, hop.n_id)
        outputs[edge_type] = run_conv(stage.convs[edge_type], hop, x_src, x_dst, degrees,
                                      inputs.device)
    if x_dst is None:
        x_dst = _rows(inputs, node_type, torch.arange(start, stop), missing_ok=True)
    return x_dst, outputs


def _rows(inputs: Inputs, node_type: NodeType, ids: Tensor,
          missing_ok: bool = False) -> Optional[Tensor]:
    rows = inputs.read(node_type, ids)
    if rows is None and not missing_ok:
        raise NotLayerwiseError(f"node type {node_type!r} has no rows to read (no features?)")
    return None if rows is None else rows.to(inputs.device)


def run_conv(conv: torch.nn.Module, hop: OneHop, x_src: Tensor, x_dst: Optional[Tensor],
             degrees: Optional[Tensor], device: torch.device) -> Tensor:
    """``conv`` on one batch's in-edges: the output rows of its destinations.

    Args:
        conv (torch.nn.Module): the edge type's message-passing module.
        hop (OneHop): the batch's in-edges.
        x_src (Tensor): the rows of ``hop.n_id`` (with ``hop.dst_first``, the
            destinations' rows are its first ``hop.num_dst``).
        x_dst (Tensor, optional): the destinations' rows.
        degrees (Tensor, optional): whole-graph degrees of ``hop.n_id`` for a
            normalising ``GCNConv``.
        device (torch.device): where ``conv`` runs.
    """
    norm = gcn.norm_of(conv)
    edge_index = hop.edge_index.to(device)
    if not hop.dst_first:
        if norm is not None:
            raise NotLayerwiseError(f"GCNConv with normalize=True on an edge type between two "
                                    f"node types is not supported (PyG's GCNConv is not "
                                    f"bipartite either)")
        kwargs = {"size": (x_src.size(0), hop.num_dst)} if _takes_size(conv) else {}
        return conv((x_src, x_dst), edge_index, **kwargs)[:hop.num_dst]
    if norm is None and isinstance(conv, BIPARTITE):  # only the destinations' rows
        y = conv((x_src, x_src[:hop.num_dst]), edge_index, size=(x_src.size(0), hop.num_dst))
    elif norm is None:
        y = conv(x_src, edge_index)
    else:
        assert degrees is not None
        edge_index, weight = gcn.normalized(hop, degrees.view(-1), norm)
        with gcn.normalize_off(conv):
            y = conv(x_src, edge_index.to(device), weight.to(device))
    return y[:hop.num_dst]


def _takes_size(conv: torch.nn.Module) -> bool:
    return "size" in inspect.signature(conv.forward).parameters


def probe_width(stage: Stage, node_type: NodeType, widths: Dict[NodeType, int],
                device: torch.device) -> Optional[int]:
    """The width of the stage's output rows of ``node_type`` (``None``: no output), from
    a two-node graph per edge type: every rank gets the same answer without asking.

    Args:
        widths: the width of every node type's input rows (types without rows left out).

    Raises:
        NotLayerwiseError: if the stage cannot run on rows of those widths.
    """
    two = torch.tensor([[1, 0], [0, 1]])
    generator = torch.Generator().manual_seed(0)

    def read(t: NodeType, ids: Tensor) -> Optional[Tensor]:
        return torch.randn(ids.numel(), widths[t], generator=generator) if t in widths \
            else None

    def hop(edge_type: EdgeType, start: int, stop: int) -> OneHop:
        return OneHop(0, 2, torch.arange(2), two, dst_first=edge_type[0] == edge_type[2])

    inputs = Inputs(read, hop, lambda et, norm, ids: torch.ones(ids.numel()), device)
    try:
        x_dst, outputs = conv_outputs(stage, node_type, 0, 2, inputs)
        y = stage.combine(node_type, x_dst, outputs)
        _check_row_wise(stage, node_type, x_dst, outputs, y)
    except (RuntimeError, TypeError, ValueError, KeyError, IndexError) as exc:
        if isinstance(exc, NotLayerwiseError):
            raise
        names = ", ".join(f"{type(stage.convs[et]).__name__} of {et}" if len(stage.convs) > 1
                          else type(stage.convs[et]).__name__
                          for et in stage.edge_types_into(node_type)) or "row-wise steps"
        shown = {t: w for t, w in widths.items()} if len(widths) > 1 else \
            next(iter(widths.values()), None)
        raise NotLayerwiseError(f"{stage.name} ({names}) cannot run as layer(x, edge_index) "
                                f"on rows of width {shown}: {exc}") from exc
    if y is None:
        return None
    if not isinstance(y, Tensor) or y.dim() != 2:
        raise NotLayerwiseError(f"{stage.name} must return a 2-D tensor of node rows for "
                                f"{node_type!r}")
    return int(y.shape[1])


def _check_row_wise(stage: Stage, node_type: NodeType, x_dst: Optional[Tensor],
                    outputs: Dict[EdgeType, Tensor], y: Optional[Tensor]) -> None:
    """What runs after the edge types' outputs must treat every node's row on its own:
    each row combined alone must give the row it gave among others."""
    if not isinstance(y, Tensor) or y.dim() != 2 or y.size(0) != 2:
        return
    for i in range(2):
        alone = stage.combine(node_type, None if x_dst is None else x_dst[i:i + 1],
                              {et: out[i:i + 1] for et, out in outputs.items()})
        if not isinstance(alone, Tensor) or not torch.allclose(alone, y[i:i + 1], atol=1e-5):
            raise NotLayerwiseError(
                f"{stage.name}: what runs after the layer mixes the rows of different nodes "
                f"of {node_type!r} (a sum over nodes, batch statistics), so its result "
                f"depends on the batch; {SAMPLED_HINT}")
