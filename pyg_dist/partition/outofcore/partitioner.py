"""Out-of-core partitioning of a chunked graph on one machine, within a memory budget.

:class:`OutOfCorePartitioner` writes exactly what :class:`~pyg_dist.partition.Partitioner`
writes (format v2: the same files, ids, CSC order, halos, balance rules, statistics and
``uid``) while holding only node-sized arrays (a few int64 per node) plus what the
memory budget allows:

1. assign: the symmetric CSR is built from the edge chunks into memory-mapped scratch
   files (:mod:`.csr`); METIS runs on it when its working memory fits the budget,
   otherwise on its label-propagation clustering (the ``coarsen`` path), followed by
   the usual balance passes (node types, train nodes);
2. relabel: new ids contiguous per partition;
3. order edges: in-degrees counted, each partition's destinations cut into ranges
   whose in-edges fit the budget, records bucketed by range on disk through bounded
   buffers, then each partition's CSC built from its ranges in turn (:mod:`.edges`);
4. copy rows: node and edge data copied block by block into per-partition memory-mapped
   arrays (:mod:`.rows`);
5. uid (over per-partition digests) and write: every file, the per-partition id maps
   included, saved through :func:`~pyg_dist.format.io.atomic_dir` (``torch.save``
   streams a memory-mapped tensor without copying it).

With the same assignment the output is identical to the in-memory path's, byte for
byte in every tensor (the random method, or METIS with the same ``coarsen`` choice).
"""
from __future__ import annotations

import shutil
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from pyg_dist.chunked import ChunkedGraph
from pyg_dist.format import io
from pyg_dist.partition.assign import (METIS_BYTES_PER_ADJACENCY_BYTE, assign_csr, random_parts,
                                       vertex_weights)
from pyg_dist.format.identity import part_digest, partition_uid
from pyg_dist.format.meta import PartitionMeta, PartStats
from pyg_dist.partition.outofcore.csr import streaming_csr, type_offsets
from pyg_dist.partition.outofcore.budget import BYTES_PER_ORDERED_EDGE
from pyg_dist.partition.outofcore.edges import (EdgeBuckets, OrderedEdges, bucket_starts,
                                                bucket_type_edges, indegree, inverse_map,
                                                order_buckets)
from pyg_dist.partition.outofcore.parts import (PartPieces, halo_attr_names, part_halo,
                                                source_meta, write_source_part)
from pyg_dist.partition.outofcore.rows import gather_rows, part_arrays, row_bytes, scatter_rows
from pyg_dist.partition.outofcore.scratch import Scratch, plain
from pyg_dist.partition.outofcore.source import open_source
from pyg_dist.partition.partitioner import NodeOrder, PartitionTimings, _Laps
from pyg_dist.partition.progress import step, track
from pyg_dist.typing import EdgeType, NodeType, edge_key

Rows = Dict[str, List[np.ndarray]]  # attribute name -> one array per partition


def _rows_of(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    return array[start:stop]


class OutOfCorePartitioner:
    """Partitions a chunked graph folder into ``num_parts`` folders under ``root``.

    Args:
        input (str, Path or ChunkedGraph): the chunked graph (DGL's chunked format).
        num_parts (int): number of partitions.
        root (str or Path): output folder; must be absent or empty unless ``overwrite``.
        memory_budget (int or str): bytes (or ``"4GB"``) the streaming steps may hold
            beyond the node-sized arrays.
        method (str): ``"metis"`` (default) or ``"random"``.
        seed (int): seed for METIS, the coarsening and the random assignment.
        overwrite (bool): replace an existing non-empty ``root``.
        halo_attrs (Iterable[str]): node attributes also stored for halo nodes.
        progress (bool): report progress on ``stderr``.
        coarsen (bool, optional): METIS on a label-propagation clustering; ``None``
            (default): only when plain METIS (about 8 times the adjacency) would not fit
            the budget.

    Raises:
        ValueError: a bad option, or :class:`~.budget.MemoryBudgetError` when the budget
            cannot hold one partition's edges (naming the size needed).
    """

    def __init__(self, input: Union[str, Path, ChunkedGraph], num_parts: int,
                 root: Union[str, Path], memory_budget: Union[int, str], method: str = "metis",
                 seed: int = 0, overwrite: bool = False, halo_attrs: Iterable[str] = ("time",),
                 progress: bool = True, coarsen: Optional[bool] = None) -> None:
        if method not in ("metis", "random"):
            raise ValueError(f"unknown partition method '{method}' (the out-of-core path "
                             f"takes 'metis' or 'random')")
        if coarsen and method != "metis":
            raise ValueError(f"coarsen=True applies to method='metis', not '{method}'")
        self.source, self.budget = open_source(input, num_parts, memory_budget)
        self.num_parts, self.root, self.method, self.seed = num_parts, Path(root), method, seed
        self.overwrite, self.halo_attrs = overwrite, tuple(halo_attrs)
        self.progress, self.coarsen = progress, coarsen
        self.timings: Optional[PartitionTimings] = None
        self.bucket_flushes = 0
        self.edge_ranges = 0  # destination ranges ordered one at a time (all edge types)

    @property
    def method_name(self) -> str:
        return self.method

    def generate(self) -> PartitionMeta:
        """Writes the partitions and returns their :class:`PartitionMeta`."""
        start, laps = time.perf_counter(), _Laps()
        with io.atomic_dir(self.root, overwrite=self.overwrite) as tmp:
            scratch = Scratch(tmp / ".scratch")
            with step("assigning nodes to partitions", enabled=self.progress):
                parts, phases = self._assign(scratch)
            laps.lap("assign")
            nodes = {t: NodeOrder.from_parts(p, self.num_parts) for t, p in parts.items()}
            del parts
            laps.lap("relabel")
            edges = {et: self._order_edges(et, nodes, scratch)
                     for et in self._bar(self.source.edge_names, "ordering edges")}
            laps.lap("order_edges")
            with step("copying node and edge data", enabled=self.progress):
                node_rows = self._node_rows(nodes, scratch)
                edge_rows = self._edge_rows(edges, scratch)
            laps.lap("copy_rows")
            meta = self._meta(nodes, edges)
            uid = partition_uid(meta.to_json(), [part_digest(*self._part_ids(p, nodes, edges))
                                                 for p in range(self.num_parts)])
            laps.lap("uid")
            stats = [self._write_part(tmp, p, nodes, edges, node_rows, edge_rows, uid)
                     for p in self._bar(range(self.num_parts), "writing partitions")]
            meta = replace(meta, parts=tuple(stats), uid=uid)
            io.save_json(meta.to_json(), tmp / io.META_FILE)
            del node_rows, edge_rows, edges
            shutil.rmtree(scratch.folder)
        laps.lap("write")
        self.timings = PartitionTimings(time.perf_counter() - start, phases.get("metis", 0.0),
                                        {**phases, **laps.phases_s})
        return meta

    # ---- steps ---------------------------------------------------------------------------
    def _bar(self, items: Iterable, desc: str) -> Iterable:
        return track(items, desc, enabled=self.progress)

    def _assign(self, scratch: Scratch) -> Tuple[Dict[NodeType, np.ndarray], Dict[str, float]]:
        """The partition of every node per type, and the seconds of its steps."""
        src = self.source
        block = self.budget.block_rows(1)
        trains = {t: src.train_mask(t, block) for t in src.num_nodes}
        if self.num_parts == 1:
            return {t: np.zeros(n, dtype=np.int64) for t, n in src.num_nodes.items()}, {}
        if self.method == "random":
            return random_parts(src.num_nodes, trains, self.num_parts, self.seed), {}
        start = time.perf_counter()
        xadj, adjncy = streaming_csr(src, scratch, self.budget.block_rows(8))
        weights = vertex_weights(src.num_nodes, trains)
        phases = {"adjacency": time.perf_counter() - start}
        coarsen = self.coarsen
        if coarsen is None:
            coarsen = adjncy.nbytes * METIS_BYTES_PER_ADJACENCY_BYTE > self.budget.total
        group = np.repeat(np.arange(len(src.num_nodes)), list(src.num_nodes.values()))
        train = np.concatenate(list(trains.values()))
        del trains
        parts = assign_csr(xadj, adjncy, weights, group, train, self.num_parts, self.seed,
                           coarsen, None, phases, coarse_budget=self.budget.total)
        scratch.drop(adjncy)
        offsets = type_offsets(src.num_nodes)
        return {t: parts[offsets[t]:offsets[t] + n].copy() for t, n in src.num_nodes.items()}, \
            phases

    def _order_edges(self, edge_type: EdgeType, nodes: Dict[NodeType, NodeOrder],
                     scratch: Scratch) -> OrderedEdges:
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
        buckets = EdgeBuckets(scratch, len(starts) - 1, self.budget.buffer_bytes)
        bucket_type_edges(src.edge_chunks(edge_type), nodes[edge_type[0]].old_to_new,
                          dst.old_to_new, starts, buckets)
        self.bucket_flushes += buckets.flushes
        return order_buckets(buckets, starts, members, dst.offsets, src.num_edges(edge_type),
                             scratch, edge_key(edge_type))

    def _node_rows(self, nodes: Dict[NodeType, NodeOrder], scratch: Scratch
                   ) -> Dict[NodeType, Rows]:
        out: Dict[NodeType, Rows] = {}
        for t, specs in self.source.node_specs.items():
            order, out[t] = nodes[t], {}
            for name, spec in specs.items():
                arrays = part_arrays(scratch, f"node-{name}", spec, order.offsets)
                scatter_rows(partial(self.source.node_rows, t, name),
                             partial(_rows_of, order.old_to_new), self.source.num_nodes[t],
                             order.offsets, arrays, self.budget.block_rows(row_bytes(spec)))
                out[t][name] = arrays
        return out

    def _edge_rows(self, edges: Dict[EdgeType, OrderedEdges], scratch: Scratch
                   ) -> Dict[EdgeType, Rows]:
        out: Dict[EdgeType, Rows] = {}
        for et, specs in self.source.edge_specs.items():
            out[et] = {}
            if not specs:
                continue
            key, total = edge_key(et), self.source.num_edges(et)
            inverse = inverse_map(edges[et].edge_map, scratch, key, self.budget.block_rows(16))
            for name, spec in specs.items():
                arrays = part_arrays(scratch, f"edge-{name}", spec, edges[et].offsets)
                scatter_rows(partial(self.source.edge_rows, et, name), partial(_rows_of, inverse),
                             total, edges[et].offsets, arrays,
                             self.budget.block_rows(row_bytes(spec)))
                out[et][name] = arrays
        return out

    def _meta(self, nodes: Dict[NodeType, NodeOrder],
              edges: Dict[EdgeType, OrderedEdges]) -> PartitionMeta:
        """The META of this partitioning, without per-partition statistics and uid."""
        return source_meta(self.source, self.num_parts, {t: o.offsets for t, o in nodes.items()},
                           {et: o.offsets for et, o in edges.items()}, self.method_name,
                           self.seed)

    def _write_part(self, tmp: Path, part: int, nodes: Dict[NodeType, NodeOrder],
                    edges: Dict[EdgeType, OrderedEdges], node_rows: Dict[NodeType, Rows],
                    edge_rows: Dict[EdgeType, Rows], uid: str) -> PartStats:
        node_ids, edge_ids = self._part_ids(part, nodes, edges)
        pieces = PartPieces(
            csc={et: (o.parts[part].indptr, o.parts[part].indices) for et, o in edges.items()},
            node_rows={t: {k: v[part] for k, v in rows.items()} for t, rows in node_rows.items()},
            edge_rows={et: {k: v[part] for k, v in rows.items()}
                       for et, rows in edge_rows.items()},
            node_ids=node_ids, edge_ids=edge_ids)
        offsets = {t: o.offsets for t, o in nodes.items()}
        halo = part_halo(self.source, part, pieces, offsets)
        halo_rows = {t: {k: gather_rows(node_rows[t][k], offsets[t], ids,
                                        self.source.node_specs[t][k])
                         for k in halo_attr_names(self.source, t, self.halo_attrs)}
                     for t, ids in halo.halo.items()}
        return write_source_part(tmp, part, self.source, pieces, offsets, halo, halo_rows, uid)

    @staticmethod
    def _part_ids(part: int, nodes: Dict[NodeType, NodeOrder],
                  edges: Dict[EdgeType, OrderedEdges]) -> tuple:
        """Original ids of the nodes partition ``part`` owns and of its edges (views)."""
        return ({t: o.new_to_old[o.offsets[part]:o.offsets[part + 1]] for t, o in nodes.items()},
                {t: plain(o.edge_map[o.offsets[part]:o.offsets[part + 1]])
                 for t, o in edges.items()})
