"""The dataclasses of a layer-wise plan (built in :mod:`pyg_dist.inference._plan`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch
from torch import Tensor

from pyg_dist._typing import EdgeType, NodeType

# combine(node_type, the destinations' input rows or None, {edge type: output rows})
#   -> the node type's output rows, or None: the stage gives the type no output
Combine = Callable[[NodeType, Optional[Tensor], Dict[EdgeType, Tensor]], Optional[Tensor]]


@dataclass
class Stage:
    """One layer of a model, as the engine runs it on a batch of one node type.

    Args:
        name (str): for progress and errors (``"layer 0"``).
        convs (Dict[EdgeType, torch.nn.Module]): the message-passing module of every
            edge type the layer reads (may be empty: a row-wise step).
        node_types (List[NodeType]): the node types it computes, in order; every other
            type keeps its rows.
        combine (callable): ``combine(node_type, x_dst, outputs)``: the node type's
            output rows from its destinations' input rows (``None`` if the type has no
            input rows) and the outputs of ``convs`` on the edge types into it; returns
            ``None`` when the stage gives the type no output.
    """
    name: str
    convs: Dict[EdgeType, torch.nn.Module]
    node_types: List[NodeType]
    combine: Combine

    def edge_types_into(self, node_type: NodeType) -> List[EdgeType]:
        return [et for et in self.convs if et[2] == node_type]


@dataclass
class Plan:
    """A model as a list of stages.

    Args:
        stages (List[Stage]): in order; stage ``i`` reads the rows stage ``i - 1`` wrote
            (the node features for the first).
        hetero (bool): whether the result is a dict by node type.
    """
    stages: List[Stage]
    hetero: bool
