"""A pure function: sampled batch + fetched features -> ``Data`` / ``HeteroData``.

Batches carry the same fields as ``torch_geometric.loader.NeighborLoader`` /
``LinkNeighborLoader`` batches: node and edge attributes, ``edge_index``,
``n_id``, ``e_id`` (original ids; the relabelled ones as ``part_n_id``/``part_e_id``),
``input_id``, ``batch_size``, ``num_sampled_nodes``,
``num_sampled_edges``, ``batch`` (disjoint), ``seed_time``, and for links
``edge_label_index``/``edge_label``/``edge_label_time`` or
``src_index``/``dst_pos_index``/``dst_neg_index``.

There is one path: every batch is built as a ``HeteroData``; a homogeneous graph is
its one node type and one edge type, made into a ``Data`` at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.sampler._hop_state import edge_index
from pyg_dist.sampler._types import (FeatureResponse, LinkSeeds, NodeSeeds, SampledBatch,
                                    SampledSubgraph)
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType

Batch = Union[Data, HeteroData]


@dataclass
class OriginalIds:
    """Original ids of the sampled nodes and edges, row-aligned with the subgraph's.

    Args:
        nodes: per node type, the original id of every sampled node.
        edges: per edge type, the original id of every sampled edge.
    """
    nodes: Dict[NodeType, Tensor] = field(default_factory=dict)
    edges: Dict[EdgeType, Tensor] = field(default_factory=dict)


def collate(batch: SampledBatch, feats: FeatureResponse, meta: PartitionMeta,
            original: Optional[OriginalIds] = None) -> Batch:
    """The PyG batch of a sampled subgraph, its features and its seeds. ``n_id``/``e_id``
    are ``original``'s ids (``None``: the relabelled ids, for internal use);
    ``part_n_id``/``part_e_id`` are always the relabelled ids."""
    data = _subgraph(batch.subgraph, feats, meta, original)
    if isinstance(batch.seeds, NodeSeeds):
        _node_seeds(data, batch.seeds)
    else:
        _link_seeds(data, batch.seeds)
    return data if meta.is_hetero else _as_data(data)


def _subgraph(sub: SampledSubgraph, feats: FeatureResponse, meta: PartitionMeta,
              original: Optional[OriginalIds]) -> HeteroData:
    data = HeteroData()
    empty = torch.empty(0, dtype=torch.long)
    for node_type in meta.node_types:
        store = data[node_type]
        store.part_n_id = sub.node.get(node_type, empty)
        store.n_id = original.nodes.get(node_type, empty) if original else store.part_n_id
        store.num_nodes = int(store.n_id.numel())
        for attr, value in feats.nodes.get(node_type, {}).items():
            store[attr] = value
        if sub.batch is not None and node_type in sub.batch:
            store.batch = sub.batch[node_type]
        if node_type in sub.num_sampled_nodes:
            store.num_sampled_nodes = sub.num_sampled_nodes[node_type]
    for edge_type in meta.edge_types:
        store = data[edge_type]
        store.edge_index = edge_index(sub.row[edge_type], sub.col[edge_type])
        if edge_type in sub.num_sampled_edges:
            store.num_sampled_edges = sub.num_sampled_edges[edge_type]
        if edge_type not in sub.edge:  # subgraph_type="bidirectional" (hetero): as PyG,
            continue                   # no edge ids, so no edge attributes
        store.part_e_id = sub.edge[edge_type]
        store.e_id = original.edges.get(edge_type, empty) if original else store.part_e_id
        for attr, value in feats.edges.get(edge_type, {}).items():
            store[attr] = value
    return data


def _node_seeds(data: HeteroData, seeds: NodeSeeds) -> None:
    store = data[seeds.input_type]
    store.input_id = seeds.input_id
    store.batch_size = int(seeds.input_id.numel())
    if seeds.seed_time is not None:
        store.seed_time = seeds.seed_time


def _link_seeds(data: HeteroData, seeds: LinkSeeds) -> None:
    src_type, _, dst_type = seeds.input_type
    edges = data[seeds.input_type]
    edges.input_id = seeds.input_id
    if seeds.is_triplet:
        data[src_type].src_index = seeds.src_index
        data[dst_type].dst_pos_index = seeds.dst_pos_index
        data[dst_type].dst_neg_index = seeds.dst_neg_index
        if seeds.src_time is not None:
            data[src_type].seed_time = seeds.src_time
        return
    edges.edge_label_index = seeds.edge_label_index
    for name in ("edge_label", "edge_label_time"):
        if getattr(seeds, name) is not None:
            edges[name] = getattr(seeds, name)


def _as_data(data: HeteroData) -> Data:
    """The one node type and one edge type of a homogeneous batch, as a ``Data``."""
    out = Data()
    for key, value in data[HOMO_NODE].items():
        out[key] = value
    for key, value in data[HOMO_EDGE].items():
        out[key] = value
    return out
