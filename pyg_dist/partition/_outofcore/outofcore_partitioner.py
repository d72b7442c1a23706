"""Out-of-core partitioning of a chunked graph on one machine, within a memory budget.

:class:`OutOfCoreStages` are the pipeline's stages (:mod:`pyg_dist.partition._pipeline`)
for a chunked folder; :class:`OutOfCorePartitioner` runs the pipeline with them. It
writes exactly what :class:`~pyg_dist.partition.Partitioner`
writes (format v2: the same files, ids, CSC order, halos, balance rules, statistics and
``uid``) while holding only node-sized arrays (a few int64 per node) plus what the
memory budget allows:

1. assign: the symmetric CSR is built from the edge chunks into memory-mapped scratch
   files (:mod:`.csr`) for the assigner (every one the in-memory path has); METIS runs
   on it when its working memory fits the budget, otherwise on its label-propagation
   clustering (the ``coarsen`` path), followed by the usual balance passes;
2. relabel: new ids contiguous per partition;
3. order edges: in-degrees counted, each partition's destinations cut into ranges
   whose in-edges fit the budget, records bucketed by range on disk through bounded
   buffers, then each partition's CSC built from its ranges in turn (:mod:`.edges`);
4. copy rows: node and edge data copied block by block into per-partition memory-mapped
   arrays (:mod:`.rows`);
5. uid (over per-partition digests) and write: every file, the per-partition id maps
   included, saved through :func:`~pyg_dist.format._files.atomic_dir` (``torch.save``
   streams a memory-mapped tensor without copying it).

With the same assignment the output is identical to the in-memory path's, byte for
byte in every tensor (the random method, or METIS with the same ``coarsen`` choice).
"""
from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from pyg_dist.chunked import ChunkedGraph
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.partition._assign import AssignInput, AssignOptions
from pyg_dist.partition._assigners import run_assigner
from pyg_dist.partition._common import NodeOrder, PartitionTimings
from pyg_dist.partition._given import check_given
from pyg_dist.partition._kaminpar_assign import kaminpar_module
from pyg_dist.partition._options import PartitionOptions, check_options, method_label
from pyg_dist.partition._outofcore.budget import BYTES_PER_ORDERED_EDGE, MemoryBudget
from pyg_dist.partition._outofcore.csr import streaming_csr
from pyg_dist.partition._outofcore.edges import (EdgeBuckets, OrderedEdges, bucket_starts,
                                                bucket_type_edges, indegree, inverse_map,
                                                order_buckets)
from pyg_dist.partition._outofcore.row_copy import gather_rows, part_arrays, row_bytes, scatter_rows
from pyg_dist.partition._outofcore.scratch import Scratch
from pyg_dist.partition._outofcore.source import ChunkedSource, open_source
from pyg_dist.partition._pipeline import Edges, Nodes, RunOptions, WholeGraphStages, run_pipeline
from pyg_dist.partition._writer import PartHalo, PartPieces, halo_attr_names
from pyg_dist._typing import EdgeType, NodeType, edge_key

Rows = Dict[str, List[np.ndarray]]  # attribute name -> one array per partition


def _rows_of(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    return array[start:stop]


class OutOfCoreStages(WholeGraphStages):
    """:class:`~pyg_dist.partition._pipeline.Stages` over a chunked folder: every
    graph-sized array lives in memory-mapped scratch files under the output's
    temporary folder, and each streaming step holds at most ``budget``.

    Args:
        source (ChunkedSource): the opened folder.
        budget (MemoryBudget): the memory budget.
        num_parts (int): number of partitions.
        assign (AssignOptions): the assigner and its options.
        halo_attrs (Iterable[str]): node attributes also stored for halo nodes.
    """
    copies_rows = True

    def __init__(self, source: ChunkedSource, budget: MemoryBudget, num_parts: int,
                 assign: AssignOptions, halo_attrs: Iterable[str]) -> None:
        self.schema = self.source = source
        self.budget, self.num_parts, self.options = budget, num_parts, assign
        self.halo_attrs = tuple(halo_attrs)
        self.scratch: Optional[Scratch] = None
        self.node_rows: Dict[NodeType, Rows] = {}
        self.edge_rows: Dict[EdgeType, Rows] = {}
        self.bucket_flushes = 0
        self.edge_ranges = 0  # destination ranges ordered one at a time (all edge types)

    def open(self, tmp: Path) -> None:
        self.scratch = Scratch(tmp / ".scratch")

    def close(self) -> None:
        self.node_rows, self.edge_rows = {}, {}
        shutil.rmtree(self.scratch.folder)

    def assign(self) -> Tuple[Dict[NodeType, np.ndarray], Dict[str, float]]:
        """The partition of every node per type, and the seconds of its steps."""
        src, scratch = self.source, self.scratch
        block = self.budget.block_rows(1)
        graph = AssignInput(
            dict(src.num_nodes), src.is_hetero,
            lambda: {t: src.train_mask(t, block) for t in src.num_nodes},
            lambda: streaming_csr(src, scratch, self.budget.block_rows(8)),
            self.budget.total, scratch.drop)
        assignment = run_assigner(graph, self.num_parts, self.options)
        return assignment.parts, assignment.phases_s

    def order_edges(self, edge_type: EdgeType, nodes: Nodes) -> OrderedEdges:
        """Buckets one edge type by destination range (within the budget once ordered),
        then orders each partition's buckets in turn."""
        src, name = self.source, self.source.edge_names[edge_type]
        dst = nodes[edge_type[2]]
        degree = indegree(src.edge_chunks(edge_type), src.num_nodes[edge_type[2]])[
            dst.new_to_old]
        starts, members = bucket_starts(degree, dst.offsets, range(self.num_parts),
                                        self.budget, BYTES_PER_ORDERED_EDGE, f"edge type {name}")
        del degree
        self.edge_ranges += len(starts) - 1
        buckets = EdgeBuckets(self.scratch, len(starts) - 1, self.budget.buffer_bytes)
        bucket_type_edges(src.edge_chunks(edge_type), nodes[edge_type[0]].old_to_new,
                          dst.old_to_new, starts, buckets)
        self.bucket_flushes += buckets.flushes
        return order_buckets(buckets, starts, members, dst.offsets, src.num_edges(edge_type),
                             self.scratch, edge_key(edge_type))

    def copy_rows(self, nodes: Nodes, edges: Edges) -> None:
        """Node and edge data copied block by block into per-partition scratch arrays."""
        src = self.source
        for t, specs in src.node_specs.items():
            order, self.node_rows[t] = nodes[t], {}
            for name, spec in specs.items():
                arrays = part_arrays(self.scratch, f"node-{name}", spec, order.offsets)
                scatter_rows(partial(src.node_rows, t, name),
                             partial(_rows_of, order.old_to_new), src.num_nodes[t],
                             order.offsets, arrays, self.budget.block_rows(row_bytes(spec)))
                self.node_rows[t][name] = arrays
        for et, specs in src.edge_specs.items():
            self.edge_rows[et] = {}
            if not specs:
                continue
            key, total = edge_key(et), src.num_edges(et)
            inverse = inverse_map(edges[et].edge_map, self.scratch, key,
                                  self.budget.block_rows(16))
            for name, spec in specs.items():
                arrays = part_arrays(self.scratch, f"edge-{name}", spec, edges[et].offsets)
                scatter_rows(partial(src.edge_rows, et, name), partial(_rows_of, inverse),
                             total, edges[et].offsets, arrays,
                             self.budget.block_rows(row_bytes(spec)))
                self.edge_rows[et][name] = arrays

    def pieces(self, part: int, nodes: Nodes, edges: Edges) -> PartPieces:
        return PartPieces(
            csc={et: (o.parts[part].indptr, o.parts[part].indices) for et, o in edges.items()},
            node_rows={t: {k: v[part] for k, v in rows.items()}
                       for t, rows in self.node_rows.items()},
            edge_rows={et: {k: v[part] for k, v in rows.items()}
                       for et, rows in self.edge_rows.items()},
            node_ids={t: o.new_to_old[o.offsets[part]:o.offsets[part + 1]]
                      for t, o in nodes.items()},
            edge_ids={et: o.edge_map[o.offsets[part]:o.offsets[part + 1]]
                      for et, o in edges.items()})

    def halo_rows(self, part: int, halo: PartHalo, nodes: Dict[NodeType, NodeOrder]
                  ) -> Dict[NodeType, Dict[str, np.ndarray]]:
        return {t: {k: gather_rows(self.node_rows[t][k], nodes[t].offsets, ids,
                                   self.source.node_specs[t][k])
                    for k in halo_attr_names(self.source, t, self.halo_attrs)}
                for t, ids in halo.halo.items()}


class OutOfCorePartitioner:
    """Partitions a chunked graph folder into ``num_parts`` folders under ``root``.

    Args:
        input (str, Path or ChunkedGraph): the chunked graph (DGL's chunked format).
        num_parts (int): number of partitions.
        root (str or Path): output folder; must be absent or empty unless ``overwrite``.
        memory_budget (int or str): bytes (or ``"4GB"``) the streaming steps may hold
            beyond the node-sized arrays.
        method (str): ``"metis"`` (default), ``"kaminpar"``, ``"random"`` or ``"given"``
            (as :class:`~pyg_dist.partition.Partitioner` takes them).
        seed (int): seed for METIS, the coarsening and the random assignment.
        overwrite (bool): replace an existing non-empty ``root``.
        halo_attrs (Iterable[str]): node attributes also stored for halo nodes.
        progress (bool): report progress on ``stderr``.
        coarsen (bool, optional): METIS on a label-propagation clustering; ``None``
            (default): only when plain METIS (about 8 times the adjacency) would not fit
            the budget.
        recursive (bool, optional): METIS's algorithm (see
            :class:`~pyg_dist.partition.Partitioner`).
        assignment (Tensor or dict, optional): with ``method="given"``, the partition
            of every node.
        allow_external_paths (bool): with a folder, read chunk files outside it too.

    Raises:
        ValueError: a bad option, or :class:`~.budget.MemoryBudgetError` when the budget
            cannot hold one partition's edges (naming the size needed).
    """

    def __init__(self, input: Union[str, Path, ChunkedGraph], num_parts: int,
                 root: Union[str, Path], memory_budget: Union[int, str], method: str = "metis",
                 seed: int = 0, overwrite: bool = False, halo_attrs: Iterable[str] = ("time",),
                 progress: bool = True, coarsen: Optional[bool] = None,
                 recursive: Optional[bool] = None, assignment: Any = None,
                 allow_external_paths: bool = False) -> None:
        check_options(PartitionOptions(method, seed, coarsen, recursive, assignment,
                                       memory_budget, allow_external_paths), "out_of_core")
        if method == "kaminpar":
            kaminpar_module()
        source, budget = open_source(input, num_parts, memory_budget, allow_external_paths)
        if method == "given":
            check_given(source.num_nodes, source.is_hetero, num_parts, assignment)
        self.source, self.budget = source, budget
        self.num_parts, self.root, self.method, self.seed = num_parts, Path(root), method, seed
        self.overwrite, self.progress = overwrite, progress
        self.method_name = method_label(method, recursive)
        self.stages = OutOfCoreStages(source, budget, num_parts, AssignOptions(
            method, seed, coarsen, recursive, assignment), halo_attrs)
        self.timings: Optional[PartitionTimings] = None

    @property
    def bucket_flushes(self) -> int:
        return self.stages.bucket_flushes

    @property
    def edge_ranges(self) -> int:
        return self.stages.edge_ranges

    def generate(self) -> PartitionMeta:
        """Writes the partitions and returns their :class:`PartitionMeta`."""
        meta, self.timings = run_pipeline(self.stages, RunOptions(
            self.num_parts, self.root, self.overwrite, self.method_name, self.seed,
            self.progress))
        return meta
