"""What layer-wise inference needs to know about a model: its layers, one hop each, and
the row-wise function that runs after each of them.

A model can be run one layer at a time over a partitioned graph when every layer
computes a node's output from the node's own row and the rows of its in-neighbours
only (one hop of message passing), and whatever runs between layers treats every
node's row on its own (activations, eval-mode batch norm, dropout). PyG's
:class:`~torch_geometric.nn.models.basic_gnn.BasicGNN` models (``GCN``,
``GraphSAGE``, ``GIN``, ``GAT``, ``PNA``, ``EdgeCNN``) are described automatically
(:func:`spec_of`), and so are ``to_hetero`` models (read from their traced graph by
:mod:`pyg_dist.inference._fx`); other models describe themselves with a method
``layerwise_spec(self) -> LayerwiseSpec`` (on a heterogeneous graph, layers given as
``HeteroConv`` or dicts of edge type -> module, ``after`` on dicts of node type -> rows).

Example (a user model)::

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = SAGEConv(16, 32), SAGEConv(32, 7)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

        def layerwise_spec(self) -> LayerwiseSpec:
            return LayerwiseSpec(layers=[self.conv1, self.conv2],
                                 after=lambda i, x: x.relu() if i == 0 else x)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.nn import conv as pyg_conv
from torch_geometric.nn.conv import HeteroConv
from torch_geometric.nn import norm as pyg_norm
from torch_geometric.nn.models.basic_gnn import BasicGNN

from pyg_dist.errors import PygDistError
from pyg_dist._typing import EdgeType

AfterFunc = Callable[[int, Any], Any]

SAMPLED_HINT = ("run it with sampled inference instead: pyg_dist.infer(model, data, "
                "num_neighbors=[...])")

# layers whose output for a node depends on more than its 1-hop in-neighbourhood
_MULTI_HOP = tuple(getattr(pyg_conv, name) for name in (
    "SGConv", "SSGConv", "TAGConv", "APPNP", "ChebConv", "GCN2Conv", "DirGNNConv",
    "LGConv", "ClusterGCNConv") if hasattr(pyg_conv, name))


class NotLayerwiseError(ValueError, PygDistError):
    """The model cannot be run one layer at a time over a partitioned graph."""


@dataclass
class LayerwiseSpec:
    """A model as layer-wise inference runs it.

    Args:
        layers (Sequence): the message-passing layers in order. On a homogeneous graph
            each is a ``torch.nn.Module`` called as ``layer(x, edge_index)`` on a
            subgraph whose first rows are the destination nodes of a batch, followed by
            their in-neighbours, with every in-edge of those destinations; only the
            destinations' output rows are kept. On a heterogeneous graph each is a
            :class:`~torch_geometric.nn.conv.HeteroConv` or a dict of edge type ->
            module; a module of an edge type between two node types is called as
            ``layer((x_src, x_dst), edge_index)``, and the outputs into one node type
            are combined with the ``HeteroConv``'s ``aggr`` (else :attr:`aggr`).
            A layer must compute a node's output from its own row and its
            in-neighbours' rows only. ``GCNConv`` with ``normalize=True`` is handled
            specially (its degree normalisation uses the degrees of the whole graph).
        after (callable, optional): ``after(i, x)`` runs on the output rows of layer ``i``
            (every layer, the last included); it must treat every row on its own
            (activations, eval-mode batch norm, a final linear layer). On a
            heterogeneous graph ``x`` is a dict ``{node_type: rows}`` of the types layer
            ``i`` updated, and ``after`` returns a dict; a type it leaves out has no
            output from layer ``i`` (types a layer does not update keep their rows).
            ``None``: nothing.
        aggr (str): how the outputs of several edge types into one node type combine,
            for layers given as dicts (``"sum"``, ``"mean"``, ``"max"``, ``"min"``,
            ``"cat"``). (default: ``"sum"``)
    """
    layers: Sequence[Any]
    after: Optional[AfterFunc] = None
    aggr: str = "sum"

    def __post_init__(self) -> None:
        if len(self.layers) == 0:
            raise NotLayerwiseError("LayerwiseSpec.layers is empty: a model needs at least "
                                    "one message-passing layer")
        for i, layer in enumerate(self.layers):
            convs = edge_modules(layer)
            if convs is None:
                if not isinstance(layer, torch.nn.Module):
                    raise NotLayerwiseError(f"LayerwiseSpec.layers[{i}] is a "
                                            f"{type(layer).__name__}, not a torch.nn.Module, "
                                            f"a HeteroConv or a dict of edge type -> module")
                _check_layer(f"layer {i}", layer)
            else:
                for edge_type, conv in convs.items():
                    _check_layer(f"layer {i}, edge type {edge_type}", conv)

    @property
    def is_hetero(self) -> bool:
        """Whether the layers are given per edge type (a heterogeneous model)."""
        return edge_modules(self.layers[0]) is not None

    def apply_after(self, i: int, x: Any) -> Any:
        return x if self.after is None else self.after(i, x)


def edge_modules(layer: Any) -> Optional[Dict[EdgeType, torch.nn.Module]]:
    """The modules of a heterogeneous layer by edge type (``None``: a homogeneous layer).

    Raises:
        NotLayerwiseError: for a dict whose keys are not edge types or whose values are
            not modules.
    """
    if isinstance(layer, HeteroConv):
        items = list(layer.convs.items())
    elif isinstance(layer, Mapping):
        items = list(layer.items())
    else:
        return None
    out: Dict[EdgeType, torch.nn.Module] = {}
    for key, conv in items:
        edge_type = tuple(key.split("__")) if isinstance(key, str) else tuple(key)
        if len(edge_type) != 3 or not isinstance(conv, torch.nn.Module):
            raise NotLayerwiseError(f"a heterogeneous layer maps edge types (src, rel, dst) "
                                    f"to modules; got {key!r} -> {type(conv).__name__}")
        out[edge_type] = conv
    return out


def layer_aggr(spec: LayerwiseSpec, i: int) -> Optional[str]:
    """How layer ``i`` combines the outputs of edge types into one node type."""
    layer = spec.layers[i]
    return layer.aggr if isinstance(layer, HeteroConv) else spec.aggr


def _check_layer(where: str, layer: torch.nn.Module) -> None:
    if isinstance(layer, _MULTI_HOP):
        raise NotLayerwiseError(
            f"{where} ({type(layer).__name__}) reads more than one hop of "
            f"neighbours, so it cannot be run one layer at a time; {SAMPLED_HINT}")
    if isinstance(layer, pyg_conv.GCNConv) and layer.flow != "source_to_target":
        raise NotLayerwiseError(f"{where} (GCNConv) uses flow={layer.flow!r}: "
                                f"only 'source_to_target' is supported; {SAMPLED_HINT}")


def spec_of(model: torch.nn.Module) -> LayerwiseSpec:
    """The :class:`LayerwiseSpec` of ``model``.

    Args:
        model (torch.nn.Module): a PyG ``BasicGNN`` (``GCN``, ``GraphSAGE``, ``GIN``,
            ``GAT``, ``PNA``, ``EdgeCNN``) or a model with a ``layerwise_spec()`` method.

    Raises:
        NotLayerwiseError: naming what cannot be split, and pointing to sampled mode.
    """
    method = getattr(model, "layerwise_spec", None)
    if callable(method):
        spec = method()
        if not isinstance(spec, LayerwiseSpec):
            raise NotLayerwiseError(f"{type(model).__name__}.layerwise_spec() returned a "
                                    f"{type(spec).__name__}, expected a LayerwiseSpec")
        return spec
    if isinstance(model, BasicGNN):
        return _basic_gnn_spec(model)
    raise NotLayerwiseError(
        f"{type(model).__name__} is not a PyG BasicGNN and has no layerwise_spec() method, "
        f"so its layers cannot be run one at a time; give it a layerwise_spec() returning "
        f"pyg_dist.inference.LayerwiseSpec, or {SAMPLED_HINT}")


def _basic_gnn_spec(model: BasicGNN) -> LayerwiseSpec:
    """Layers and in-between steps of a ``BasicGNN``, as its ``forward`` runs them."""
    name = type(model).__name__
    if model.jk_mode not in (None, "last"):
        raise NotLayerwiseError(
            f"{name}(jk={model.jk_mode!r}) combines every layer's output per node; layer-wise "
            f"inference supports jk=None and jk='last' (as PyG's BasicGNN.inference); "
            f"{SAMPLED_HINT}")
    for i, norm in enumerate(model.norms):
        _check_norm(name, i, norm)
    last = model.num_layers - 1
    act, act_first = model.act, model.act_first

    def after(i: int, x: Tensor) -> Tensor:
        if i < last or model.jk_mode is not None:
            if act is not None and act_first:
                x = act(x)
            x = model.norms[i](x)
            if act is not None and not act_first:
                x = act(x)
            # dropout: identity in eval mode
        if i == last and hasattr(model, "lin"):
            x = model.lin(x)
        return x

    return LayerwiseSpec(layers=list(model.convs), after=after)


def _check_norm(model_name: str, i: int, norm: torch.nn.Module) -> None:
    """Only norms that treat each node's row on its own (in eval mode) can run per batch."""
    row_wise = isinstance(norm, torch.nn.Identity)
    if isinstance(norm, (torch.nn.BatchNorm1d, pyg_norm.BatchNorm)):
        inner = norm.module if isinstance(norm, pyg_norm.BatchNorm) else norm
        row_wise = bool(inner.track_running_stats)  # else eval mode uses batch statistics
    if isinstance(norm, pyg_norm.LayerNorm) and norm.mode == "node":
        row_wise = True
    if not row_wise:
        raise NotLayerwiseError(
            f"{model_name}: norm {i} ({type(norm).__name__}) normalises over many nodes, so "
            f"its result depends on the batch; {SAMPLED_HINT}")


def layer_names(spec: LayerwiseSpec) -> List[str]:
    """Class names of the layers (for progress and errors)."""
    return [type(layer).__name__ for layer in spec.layers]
