"""The pipeline's stages for a ``Data``/``HeteroData`` held in memory.

Every array is an ordinary in-memory array: edges are put in CSC order per edge type
(:func:`~pyg_dist.partition._graph_kernels.csc_order`), and each partition's rows are
gathered from the graph's tensors when it is written (nothing is copied ahead).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist.partition._assign import AssignInput, AssignOptions
from pyg_dist.partition._assigners import run_assigner
from pyg_dist.partition._common import NodeOrder, type_offsets
from pyg_dist.partition._graph_kernels import EdgeBlock, csc_order, gather_sources, symmetric_csr
from pyg_dist.partition._pipeline import Edges, Nodes, WholeGraphStages
from pyg_dist.format._tables import GraphTables
from pyg_dist.partition._writer import PartHalo, PartPieces
from pyg_dist._typing import EdgeType, NodeType


@dataclass
class EdgeOrder:
    """One edge type in CSC order of new destination ids (global edge id = position).

    New source ids are not held for the whole graph; each partition gathers its own.

    Args:
        indptr: ``num_nodes + 1`` pointers over new destination ids.
        edge_map: original edge id of every new edge id.
        offsets: partition edge offsets.
    """
    indptr: np.ndarray
    edge_map: np.ndarray
    offsets: Tuple[int, ...]


def tables_input(tables: GraphTables) -> AssignInput:
    """What the assigners see of a graph in memory (the CSR built when they ask)."""
    def csr() -> Tuple[np.ndarray, np.ndarray]:
        offsets = type_offsets(tables.num_nodes)
        blocks = [EdgeBlock(index[0].numpy(), index[1].numpy(), offsets[et[0]], offsets[et[2]])
                  for et, index in tables.edge_index.items()]
        return symmetric_csr(blocks, tables.total_nodes)

    def trains() -> Dict[NodeType, np.ndarray]:
        masks = {t: tables.masks(t).get("train") for t in tables.num_nodes}
        return {t: np.zeros(tables.num_nodes[t], dtype=bool) if m is None else m.numpy()
                for t, m in masks.items()}

    return AssignInput(dict(tables.num_nodes), tables.is_hetero, trains, csr)


class MemoryStages(WholeGraphStages):
    """:class:`~pyg_dist.partition._pipeline.Stages` over :class:`GraphTables`.

    Args:
        tables (GraphTables): the graph.
        num_parts (int): number of partitions.
        assign (AssignOptions): the assigner and its options.
        halo_attrs (Iterable[str]): node attributes also stored for halo nodes.
    """
    copies_rows = False

    def __init__(self, tables: GraphTables, num_parts: int, assign: AssignOptions,
                 halo_attrs: Iterable[str]) -> None:
        self.schema = self.tables = tables
        self.num_parts, self.options = num_parts, assign
        self.halo_attrs = tuple(halo_attrs)

    def assign(self) -> Tuple[Dict[NodeType, np.ndarray], Dict[str, float]]:
        assignment = run_assigner(tables_input(self.tables), self.num_parts, self.options)
        return assignment.parts, assignment.phases_s

    def order_edges(self, edge_type: EdgeType, nodes: Nodes) -> EdgeOrder:
        dst_order = nodes[edge_type[2]]
        indptr, order = csc_order(self.tables.edge_index[edge_type][1].numpy(),
                                  dst_order.old_to_new, self.tables.num_nodes[edge_type[2]])
        offsets = tuple(int(indptr[o]) for o in dst_order.offsets)
        return EdgeOrder(indptr, order, offsets)

    def copy_rows(self, nodes: Nodes, edges: Edges) -> None:
        pass

    def pieces(self, part: int, nodes: Nodes, edges: Edges) -> PartPieces:
        """CSC slices, edge and node rows and id maps of one partition."""
        csc, edge_rows, edge_ids = {}, {}, {}
        for et, eo in edges.items():
            lo, hi = nodes[et[2]].offsets[part], nodes[et[2]].offsets[part + 1]
            e_lo, e_hi = eo.offsets[part], eo.offsets[part + 1]
            edge_ids[et] = eo.edge_map[e_lo:e_hi]
            indices = gather_sources(self.tables.edge_index[et][0].numpy(),
                                     nodes[et[0]].old_to_new, edge_ids[et])
            csc[et] = (torch.from_numpy(eo.indptr[lo:hi + 1] - e_lo), torch.from_numpy(indices))
            rows = torch.from_numpy(edge_ids[et])
            edge_rows[et] = {k: v[rows] for k, v in self.tables.edge_attrs[et].items()}
        node_rows, node_ids = {}, {}
        for t, order in nodes.items():
            node_ids[t] = order.new_to_old[order.offsets[part]:order.offsets[part + 1]]
            rows = torch.from_numpy(node_ids[t])
            node_rows[t] = {k: v[rows] for k, v in self.tables.node_attrs[t].items()}
        return PartPieces(csc, node_rows, edge_rows, node_ids, edge_ids)

    def halo_rows(self, part: int, halo: PartHalo, nodes: Dict[NodeType, NodeOrder]
                  ) -> Dict[NodeType, Dict[str, Tensor]]:
        out = {}
        for t, ids in halo.halo.items():
            rows = torch.from_numpy(nodes[t].new_to_old[ids])
            out[t] = {k: v[rows] for k, v in self.tables.node_attrs[t].items()
                      if k in self.halo_attrs}
        return out
