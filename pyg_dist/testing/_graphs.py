"""Id-encoded test graphs and ground truth computed on the unpartitioned graph."""
from __future__ import annotations

from typing import Dict, List, Set, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType


def encode_ids(data: Union[Data, HeteroData]) -> Union[Data, HeteroData]:
    """Adds ``nid`` (original node id) and ``oid`` (original edge id) attributes, so any
    rank can check that what it fetched belongs to the node or edge it asked for."""
    data = data.clone()
    if isinstance(data, HeteroData):
        for node_type in data.node_types:
            data[node_type].nid = torch.arange(data[node_type].num_nodes)
        for edge_type in data.edge_types:
            data[edge_type].oid = torch.arange(data[edge_type].edge_index.size(1))
    else:
        data.nid = torch.arange(data.num_nodes)
        data.oid = torch.arange(data.edge_index.size(1))
    return data


def typed(data: Union[Data, HeteroData]) -> Tuple[Dict[NodeType, int], Dict[EdgeType, Tensor]]:
    """Node counts and edge indices keyed by type (homogeneous = one type each)."""
    if isinstance(data, HeteroData):
        return ({t: data[t].num_nodes for t in data.node_types},
                {t: data[t].edge_index for t in data.edge_types})
    return {HOMO_NODE: data.num_nodes}, {HOMO_EDGE: data.edge_index}


def khop_in_neighbourhood(num_nodes: Dict[NodeType, int], edges: Dict[EdgeType, Tensor],
                          seeds: Dict[NodeType, Tensor], num_hops: int,
                          edge_types: List[EdgeType]
                          ) -> Tuple[Dict[NodeType, Set[int]], Dict[EdgeType, Set[int]]]:
    """What full-fan-out directional sampling must return, in original ids.

    Hop ``h`` takes every in-edge (over ``edge_types``) of the nodes first reached
    at hop ``h - 1``; returns the reached nodes per type and the taken edge ids.
    """
    seen = {t: set() for t in num_nodes}
    frontier = {t: set() for t in num_nodes}
    for t, ids in seeds.items():
        seen[t].update(ids.tolist())
        frontier[t].update(ids.tolist())
    taken: Dict[EdgeType, Set[int]] = {t: set() for t in edges}
    by_dst = {t: _in_edges(index) for t, index in edges.items()}
    for _ in range(num_hops):
        new = {t: set() for t in num_nodes}
        for edge_type in edge_types:
            for v in frontier[edge_type[2]]:
                for src, eid in by_dst[edge_type].get(v, ()):
                    taken[edge_type].add(eid)
                    if src not in seen[edge_type[0]]:
                        new[edge_type[0]].add(src)
        for t in num_nodes:
            seen[t] |= new[t]
        frontier = new
    return seen, taken


def _in_edges(index: Tensor) -> Dict[int, List[Tuple[int, int]]]:
    out: Dict[int, List[Tuple[int, int]]] = {}
    for eid, (src, dst) in enumerate(index.t().tolist()):
        out.setdefault(dst, []).append((src, eid))
    return out
