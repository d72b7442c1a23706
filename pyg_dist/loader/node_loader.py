"""``DistNeighborLoader``: PyG's ``NeighborLoader`` over a partitioned graph."""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist.loader.base import DistLoader
from pyg_dist.sampler.neighbor_sampler import unpack_stores
from pyg_dist.sampler.types import NumNeighbors
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.typing import NodeType

InputNodes = Union[None, NodeType, Tensor, Tuple[NodeType, Optional[Tensor]]]


def resolve_input_nodes(graph: LocalGraphStore, input_nodes: InputNodes
                        ) -> Tuple[Optional[NodeType], Tensor]:
    """``(node type or None, global seed ids)`` from PyG-style ``input_nodes``."""
    node_type: Optional[NodeType] = None
    ids = input_nodes
    if isinstance(input_nodes, str):
        node_type, ids = input_nodes, None
    elif isinstance(input_nodes, (tuple, list)):
        node_type, ids = input_nodes
    resolved = graph.meta.node_type(node_type)
    if ids is None:
        ids = graph.owned_nodes(resolved)
    ids = torch.as_tensor(ids)
    if ids.dtype == torch.bool:
        if ids.numel() != graph.meta.num_nodes[resolved]:
            raise ValueError(f"a boolean input_nodes mask needs one entry per node "
                             f"({graph.meta.num_nodes[resolved]}), got {ids.numel()}")
        ids = ids.nonzero().view(-1)
    if ids.dtype not in (torch.int64, torch.int32) or ids.dim() != 1:
        raise TypeError(f"input_nodes must be a 1-d tensor of global node ids, got "
                        f"{ids.dtype} of shape {tuple(ids.shape)}")
    ids = ids.long()
    graph.node_book(resolved).check(ids)
    return (resolved if graph.is_hetero else None), ids


class DistNeighborLoader(DistLoader):
    """Node-level minibatches of sampled neighbourhoods, as ``Data``/``HeteroData``.

    Accepts what PyG's ``NeighborLoader`` accepts, plus the distributed arguments.
    Seeds are global ids (usually this rank's share from :func:`node_split`); every
    rank yields the same number of batches per epoch unless ``even_batches=False``.

    Args:
        data: ``(feature_store, graph_store)`` of this rank's partition.
        num_neighbors: fan-out per hop (list, or dict by edge type).
        input_nodes: seeds: global ids, ``(node_type, ids)``, a node type, or ``None``
            (all nodes this partition owns).
        input_time: seed times (temporal sampling).
        **options: the shared loader options of
            :class:`~pyg_dist.loader.base.DistLoader` (``batch_size``, ``shuffle``,
            ``drop_last``, ``current_ctx``, ``num_workers``, ``concurrency``, ``device``,
            ``replace``, ``disjoint``, ``time_attr``, ``weight_attr``, ``transform``,
            ``even_batches``, ``seed``, ...).

    Example:
        >>> loader = DistNeighborLoader(data=(fs, gs), num_neighbors=[10, 5],
        ...                             input_nodes=ids, batch_size=16, current_ctx=ctx)
    """

    def __init__(self, data: Tuple[LocalFeatureStore, LocalGraphStore],
                 num_neighbors: NumNeighbors, input_nodes: InputNodes = None,
                 input_time: Optional[Tensor] = None, **options: Any) -> None:
        data = unpack_stores(data)
        self.input_type, self.input_nodes = resolve_input_nodes(data[1], input_nodes)
        if input_time is not None and input_time.numel() != self.input_nodes.numel():
            raise ValueError(f"input_time has {input_time.numel()} entries for "
                             f"{self.input_nodes.numel()} input nodes")
        self.input_time = input_time
        super().__init__(data, num_neighbors, "node", self.input_type,
                         self.input_nodes.numel(), **options)

    def _inputs(self, positions: Tensor) -> NodeSamplerInput:
        time = self.input_time[positions] if self.input_time is not None else None
        return NodeSamplerInput(input_id=positions, node=self.input_nodes[positions],
                                time=time, input_type=self.input_type)
