"""``pyg_dist.infer``: one entry for exact layer-wise and sampled inference."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from pyg_dist.embedding import DistTensor
from pyg_dist.inference._layerwise import layerwise
from pyg_dist.inference._sampled import sampled
from pyg_dist.store import LocalFeatureStore, LocalGraphStore


def infer(model: torch.nn.Module, data: Tuple[LocalFeatureStore, LocalGraphStore], *,
          num_neighbors: Optional[List[int]] = None, **options: Any
          ) -> Union[DistTensor, Dict[str, DistTensor]]:
    """Every node's output of ``model`` over the partitioned graph (collective).

    Without ``num_neighbors``: exact, one layer at a time (:func:`layerwise`: equals
    full-batch ``model(x, edge_index)``, or a ``to_hetero`` model's ``model(x_dict,
    edge_index_dict)`` on a heterogeneous graph); with it: on sampled neighbourhoods,
    every node exactly once (:func:`sampled`, for models that cannot be split into
    layers: ``model(batch.x, batch.edge_index)``, or ``model(batch.x_dict,
    batch.edge_index_dict)`` on a heterogeneous graph, one loader per output node
    type; its ``node_types`` option picks the types).

    Args:
        model (torch.nn.Module): the trained model.
        data (tuple): ``(LocalFeatureStore, LocalGraphStore)`` of this rank's partition.
        num_neighbors (List[int], optional): neighbours sampled per hop (sampled mode).
        **options: ``batch_size``, ``device``, ``progress``, ``ctx`` and the options of
            :func:`layerwise` or :func:`sampled`.

    Returns:
        DistTensor: every node's row, sharded like the graph (export it with
        :func:`~pyg_dist.inference._export`); a dict of them by node type on a
        heterogeneous graph.
    """
    if num_neighbors is None:
        return layerwise(model, data, **options)
    return sampled(model, data, num_neighbors, **options)
