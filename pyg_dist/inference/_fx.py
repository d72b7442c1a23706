"""Layer-wise plans of ``to_hetero`` models, read from their traced ``torch.fx`` graph.

``torch_geometric.nn.to_hetero`` rewrites a homogeneous model into a graph with one
call of a message-passing module per edge type (``conv1.author__writes__paper``),
the sums of those calls per destination type, and every other operation once per node
type (``relu__paper``, ``lin.paper``). Layer ``i`` is the ``i``-th module path whose
message-passing calls appear (``conv1``, ``conv2``); its **inputs** are the graph
nodes its calls read per node type. Stage ``i`` computes, for a batch of one node type
``T``, the next layer's input of ``T`` (the model's output of ``T`` after the last
layer) by running the graph nodes between: the calls of layer ``i`` into ``T`` are
replaced by the engine's outputs on the batch's in-edges, and layer ``i``'s input of
``T`` by the batch's own rows (so residual connections work). Anything else the stage
would need (another node type's rows, an earlier layer's, an edge attribute) makes the
model not layer-wise: :class:`~pyg_dist.inference._spec.NotLayerwiseError` says which
graph node. Row-wise steps before the first layer (an encoder per type) are a stage of
their own, without edges.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from torch import Tensor
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg
from torch_geometric.nn.conv import MessagePassing

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.inference._spec import SAMPLED_HINT, NotLayerwiseError
from pyg_dist.inference._stage import Combine, Plan, Stage
from pyg_dist._typing import EdgeType, NodeType

Call = Tuple[Node, EdgeType]


def fx_plan(model: GraphModule, meta: PartitionMeta) -> Plan:
    """The plan of a ``to_hetero`` model on the graph described by ``meta``.

    Raises:
        NotLayerwiseError: naming the graph node that keeps the model from running one
            layer at a time.
    """
    placeholders = [n for n in model.graph.nodes if n.op == "placeholder"]
    if len(placeholders) < 2:
        raise NotLayerwiseError(f"{type(model).__name__} is a traced model without "
                                f"(x_dict, edge_index_dict) inputs; {SAMPLED_HINT}")
    features = _feature_nodes(model, placeholders[0])
    layers = _layers(model, meta)
    inputs = [_inputs(calls) for _, calls in layers]
    outputs = _outputs(model)
    stages: List[Stage] = []
    pre = {t: n for t, n in inputs[0].items() if features.get(t) is not n}
    if pre:
        stages.append(_stage(model, "inputs", {}, pre, features, []))
    for i, (path, calls) in enumerate(layers):
        targets = inputs[i + 1] if i + 1 < len(layers) else outputs
        todo = {t: n for t, n in targets.items() if inputs[i].get(t) is not n}
        stages.append(_stage(model, path, dict((et, model.get_submodule(c.target))
                                               for c, et in calls), todo, inputs[i], calls))
    return Plan(stages, hetero=True)


def _feature_nodes(model: GraphModule, x: Node) -> Dict[NodeType, Node]:
    """The graph nodes that read one node type's features: ``x_dict.get(type)``."""
    out = {}
    for node in model.graph.nodes:
        if node.op == "call_method" and node.target == "get" and node.args and \
                isinstance(node.args[0], Node) and x in node.args[0].all_input_nodes:
            out[str(node.args[1])] = node
    return out


def _layers(model: GraphModule, meta: PartitionMeta) -> List[Tuple[str, List[Call]]]:
    """Message-passing calls grouped by module path, in order of first appearance."""
    layers: Dict[str, List[Call]] = {}
    for node in model.graph.nodes:
        if node.op != "call_module" or \
                not isinstance(model.get_submodule(node.target), MessagePassing):
            continue
        path = node.target.rsplit(".", 1)[0]
        layers.setdefault(path, []).append((node, _edge_type(node, meta)))
    if not layers:
        raise NotLayerwiseError(f"{type(model).__name__} has no message-passing layer")
    return list(layers.items())


def _edge_type(node: Node, meta: PartitionMeta) -> EdgeType:
    """The edge type a message-passing call reads (``edge_index_dict.get(edge type)``)."""
    extra = [a for a in node.args[2:] if a is not None] + \
        [k for k, v in node.kwargs.items() if v is not None]
    ei = node.args[1] if len(node.args) > 1 else None
    if extra or not (isinstance(ei, Node) and ei.op == "call_method" and ei.target == "get"):
        raise NotLayerwiseError(f"{node.target} is called with more than (x, edge_index) "
                                f"(edge attributes, sizes); {SAMPLED_HINT}")
    edge_type = tuple(ei.args[1])
    if edge_type not in meta.edge_types:
        raise NotLayerwiseError(f"{node.target} reads edge type {edge_type}, which the graph "
                                f"does not have (it has {list(meta.edge_types)})")
    return edge_type


def _inputs(calls: List[Call]) -> Dict[NodeType, Node]:
    """The graph node every call of a layer reads as the rows of each node type."""
    out: Dict[NodeType, Node] = {}
    for node, (src, _, dst) in calls:
        x = node.args[0]
        pairs = [(src, x[0]), (dst, x[1])] if isinstance(x, (tuple, list)) else [(src, x)]
        for node_type, value in pairs:
            if not isinstance(value, Node) or out.setdefault(node_type, value) is not value:
                raise NotLayerwiseError(f"{node.target} reads rows of {node_type!r} that the "
                                        f"layer's other edge types do not read; {SAMPLED_HINT}")
    return out


def _outputs(model: GraphModule) -> Dict[NodeType, Node]:
    output = next(n for n in model.graph.nodes if n.op == "output")
    result = output.args[0]
    if not isinstance(result, dict) or \
            not all(isinstance(v, Node) for v in result.values()):
        raise NotLayerwiseError(f"{type(model).__name__} must return a dict of node type -> "
                                f"rows (as to_hetero models do); {SAMPLED_HINT}")
    return {str(t): v for t, v in result.items()}


def _stage(model: GraphModule, name: str, convs: Dict[EdgeType, torch.nn.Module],
           targets: Dict[NodeType, Node], inputs: Dict[NodeType, Node],
           calls: List[Call]) -> Stage:
    programs = {t: _program(model, name, target, inputs.get(t),
                            {c: et for c, et in calls if et[2] == t})
                for t, target in targets.items()}
    return Stage(name, convs, list(targets), _combine(model, programs))


Program = Tuple[Optional[Node], Dict[Node, EdgeType], List[Node], Node]


def _program(model: GraphModule, name: str, target: Node, x_dst: Optional[Node],
             calls: Dict[Node, EdgeType]) -> Program:
    """The graph nodes (in order) that compute ``target`` from ``x_dst`` and ``calls``."""
    needed: Set[Node] = set()
    stack = [target]
    while stack:
        node = stack.pop()
        if node in needed or node is x_dst or node in calls:
            continue
        if node.op == "placeholder" or (node.op == "call_module" and isinstance(
                model.get_submodule(node.target), MessagePassing)):
            raise NotLayerwiseError(
                f"{name}: the output {target.name} depends on {node.name}, which is not the "
                f"previous layer's rows of the same node type, so the model cannot be run "
                f"one layer at a time; {SAMPLED_HINT}")
        needed.add(node)
        stack.extend(node.all_input_nodes)
    order = [n for n in model.graph.nodes if n in needed]
    return x_dst, calls, order, target


def _combine(model: GraphModule, programs: Dict[NodeType, Program]) -> Combine:
    def combine(node_type: NodeType, x_dst: Optional[Tensor],
                out: Dict[EdgeType, Tensor]) -> Optional[Tensor]:
        x_node, calls, order, target = programs[node_type]
        env: Dict[Node, Any] = {c: out[et] for c, et in calls.items()}
        if x_node is not None:
            env[x_node] = x_dst
        for node in order:
            env[node] = _run(model, node, env)
        return env[target]
    return combine


def _run(model: GraphModule, node: Node, env: Dict[Node, Any]) -> Any:
    args = map_arg(node.args, lambda n: env[n])
    kwargs = map_arg(node.kwargs, lambda n: env[n])
    if node.op == "call_module":
        return model.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    if node.op == "get_attr":
        value: Any = model
        for part in node.target.split("."):
            value = getattr(value, part)
        return value
    raise NotLayerwiseError(f"graph node {node.name} ({node.op}) cannot run per batch")
