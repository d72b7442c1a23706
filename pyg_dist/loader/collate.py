"""Pure functions: sampler output + fetched features -> ``Data`` / ``HeteroData``.

Batches carry the same fields as ``torch_geometric.loader.NeighborLoader`` /
``LinkNeighborLoader`` batches: node and edge attributes, ``edge_index``,
``n_id``, ``e_id``, ``input_id``, ``batch_size``, ``num_sampled_nodes``,
``num_sampled_edges``, ``batch`` (disjoint), ``seed_time``, and for links
``edge_label_index``/``edge_label`` or ``src_index``/``dst_pos_index``/``dst_neg_index``.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from pyg_dist.partition.meta import PartitionMeta
from pyg_dist.sampler.types import FeatureResponse
from pyg_dist.typing import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType

Batch = Union[Data, HeteroData]


def collate_nodes(out: Union[SamplerOutput, HeteroSamplerOutput], feats: FeatureResponse,
                  meta: PartitionMeta, input_type: Optional[NodeType] = None) -> Batch:
    """A node-level batch: seeds come first in ``n_id`` of ``input_type``."""
    data = _subgraph(out, feats, meta)
    input_id, seed_time = out.metadata
    store = data[input_type] if meta.is_hetero else data
    store.input_id = input_id
    store.batch_size = int(input_id.numel())
    if seed_time is not None:
        store.seed_time = seed_time
    return data


def collate_links(out: Union[SamplerOutput, HeteroSamplerOutput], feats: FeatureResponse,
                  meta: PartitionMeta, input_type: Optional[EdgeType] = None) -> Batch:
    """A link-level batch with PyG's label fields (binary or triplet layout)."""
    data = _subgraph(out, feats, meta)
    store = data[input_type] if meta.is_hetero else data
    store.input_id = out.metadata[0]
    if len(out.metadata) == 5:  # triplet
        _, src_index, dst_pos_index, dst_neg_index, seed_time = out.metadata
        node_store = data[input_type[0]] if meta.is_hetero else data
        node_store.src_index = src_index
        (data[input_type[2]] if meta.is_hetero else data).dst_pos_index = dst_pos_index
        (data[input_type[2]] if meta.is_hetero else data).dst_neg_index = dst_neg_index
        if seed_time is not None:
            node_store.seed_time = seed_time
    else:
        _, edge_label_index, edge_label, edge_label_time = out.metadata
        store.edge_label_index = edge_label_index
        if edge_label is not None:
            store.edge_label = edge_label
        if edge_label_time is not None:
            store.edge_label_time = edge_label_time
    return data


def _subgraph(out: Union[SamplerOutput, HeteroSamplerOutput], feats: FeatureResponse,
              meta: PartitionMeta) -> Batch:
    if not meta.is_hetero:
        data = Data(edge_index=torch.stack([out.row, out.col]), n_id=out.node, e_id=out.edge,
                    num_nodes=int(out.node.numel()))
        for attr, value in feats.nodes.get(HOMO_NODE, {}).items():
            data[attr] = value
        for attr, value in feats.edges.get(HOMO_EDGE, {}).items():
            data[attr] = value
        if out.batch is not None:
            data.batch = out.batch
        data.num_sampled_nodes = out.num_sampled_nodes
        data.num_sampled_edges = out.num_sampled_edges
        return data
    data = HeteroData()
    for node_type in meta.node_types:
        node = out.node.get(node_type, torch.empty(0, dtype=torch.long))
        data[node_type].n_id = node
        data[node_type].num_nodes = int(node.numel())
        for attr, value in feats.nodes.get(node_type, {}).items():
            data[node_type][attr] = value
        if out.batch is not None and node_type in out.batch:
            data[node_type].batch = out.batch[node_type]
        if node_type in out.num_sampled_nodes:
            data[node_type].num_sampled_nodes = out.num_sampled_nodes[node_type]
    for edge_type in meta.edge_types:
        data[edge_type].edge_index = torch.stack([out.row[edge_type], out.col[edge_type]])
        data[edge_type].e_id = out.edge[edge_type]
        data[edge_type].num_sampled_edges = out.num_sampled_edges[edge_type]
        for attr, value in feats.edges.get(edge_type, {}).items():
            data[edge_type][attr] = value
    return data
