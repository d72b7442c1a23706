"""What the layer-wise engine runs: a model as a list of stages over node and edge types.

A :class:`Stage` is one message-passing layer of a model: for every node type it
computes, a batch of destination nodes gets one output per edge type into that type
(the edge type's module on the batch's in-edges, :data:`Stage.convs`), and
:data:`Stage.combine` turns those outputs, and the destinations' own input rows, into
the node type's output rows (aggregation over edge types, activations, norms, a final
linear layer: anything that treats every node's row on its own). A homogeneous graph is
the case of one node type and one edge type, so homogeneous and heterogeneous models
run through one engine (:mod:`pyg_dist.inference._layerwise`).

Plans come from a :class:`~pyg_dist.inference._spec.LayerwiseSpec` (:func:`spec_plan`:
``BasicGNN`` models and user models) or from a ``to_hetero`` model's traced graph
(:func:`pyg_dist.inference._fx.fx_plan`); :func:`plan_of` picks.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import Tensor
from torch_geometric.nn.conv.hetero_conv import group

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.inference._fx import fx_plan
from pyg_dist.inference._spec import (LayerwiseSpec, NotLayerwiseError, edge_modules, layer_aggr,
                                     spec_of)
from pyg_dist.inference._stage import Combine, Plan, Stage
from pyg_dist._typing import EdgeType, NodeType

__all__ = ["Plan", "Stage", "plan_of", "spec_plan"]


def plan_of(model: torch.nn.Module, meta: PartitionMeta) -> Plan:
    """The plan of ``model`` on the graph described by ``meta``.

    Raises:
        NotLayerwiseError: if the model cannot be split into layers, or does not fit
            the graph (naming what, and pointing to sampled mode where that helps).
    """
    if isinstance(model, torch.fx.GraphModule):
        return fx_plan(model, meta)
    return spec_plan(spec_of(model), meta)


def spec_plan(spec: LayerwiseSpec, meta: PartitionMeta) -> Plan:
    """The plan of a :class:`LayerwiseSpec` on the graph described by ``meta``."""
    if spec.is_hetero != meta.is_hetero:
        graph = "heterogeneous" if meta.is_hetero else "homogeneous"
        raise NotLayerwiseError(
            f"the model's layers are {'per edge type' if spec.is_hetero else 'homogeneous'} "
            f"but the graph is {graph}: " + ("convert the model with torch_geometric.nn."
                                              "to_hetero, or give layerwise_spec() layers per "
                                              "edge type" if meta.is_hetero else
                                              "use a homogeneous model"))
    stages = [_spec_stage(spec, i, meta) for i in range(len(spec.layers))]
    return Plan(stages, hetero=meta.is_hetero)


def _spec_stage(spec: LayerwiseSpec, i: int, meta: PartitionMeta) -> Stage:
    layer = spec.layers[i]
    convs = edge_modules(layer)
    if convs is None:  # homogeneous: the graph's one edge type
        edge_type = meta.edge_types[0]
        return Stage(f"layer {i}", {edge_type: layer}, [meta.node_types[0]],
                     lambda node_type, x_dst, out: spec.apply_after(i, out[edge_type]))
    unknown = [et for et in convs if et not in meta.edge_types]
    if unknown:
        raise NotLayerwiseError(f"layer {i} has modules for edge types {unknown} that the "
                                f"graph does not have (it has {list(meta.edge_types)})")
    aggr = layer_aggr(spec, i)
    targets = list(dict.fromkeys(et[2] for et in meta.edge_types if et in convs))
    return Stage(f"layer {i}", convs, targets, _hetero_combine(spec, i, aggr))


def _hetero_combine(spec: LayerwiseSpec, i: int, aggr: Optional[str]) -> Combine:
    def combine(node_type: NodeType, x_dst: Optional[Tensor],
                out: Dict[EdgeType, Tensor]) -> Optional[Tensor]:
        rows = spec.apply_after(i, {node_type: group(list(out.values()), aggr)})
        if not isinstance(rows, dict):
            raise NotLayerwiseError(f"after({i}, x) of a heterogeneous LayerwiseSpec must "
                                    f"return a dict of node type -> rows, got "
                                    f"{type(rows).__name__}")
        return rows.get(node_type)
    return combine


def stage_names(plan: Plan) -> List[str]:
    """The stages' names (for progress)."""
    return [stage.name for stage in plan.stages]
