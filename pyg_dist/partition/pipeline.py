"""The one partition pipeline: a driver that runs the same steps over any graph source.

Steps: assign (an assigner from :mod:`pyg_dist.partition.assigners`) -> relabel (new ids
contiguous per partition, :class:`~pyg_dist.partition.common.NodeOrder`) -> order edges
(CSC of new destination ids; an edge belongs to its destination's partition) -> copy
rows (streaming sources only) -> META and ``uid`` (over every partition's id maps) ->
write every partition (:mod:`pyg_dist.partition.writer`) into a temporary folder
renamed into place at the end.

What differs between a ``Data`` in memory and a chunked folder out of core is only how
each step gets and keeps its arrays: a :class:`Stages` implementation
(:class:`~pyg_dist.partition.memory.MemoryStages`,
:class:`~pyg_dist.partition.outofcore.partitioner.OutOfCoreStages`). Halo, statistics,
META, uid and the files come from one place, so equal assignments give equal bytes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Iterable, Mapping, Protocol, Tuple

import numpy as np

from pyg_dist.format import files, io
from pyg_dist.format.identity import part_digest, partition_uid
from pyg_dist.format.meta import PartitionMeta, PartStats
from pyg_dist.partition.common import (EdgeMap, GraphSchema, Laps, NodeOrder, PartitionTimings,
                                       part_ids)
from pyg_dist.progress import step, track
from pyg_dist.partition.writer import Array, PartHalo, PartPieces, graph_meta, part_halo, \
    write_part
from pyg_dist.typing import EdgeType, NodeType

Nodes = Dict[NodeType, NodeOrder]
Edges = Mapping[EdgeType, EdgeMap]


class Stages(Protocol):
    """How one source runs the pipeline's steps (see the module docstring).

    ``schema`` is the graph's :class:`~pyg_dist.partition.common.GraphSchema`;
    ``copies_rows`` says whether :meth:`copy_rows` does anything (timed as
    ``copy_rows`` then).
    """
    schema: GraphSchema
    copies_rows: bool

    def open(self, tmp: Path) -> None:
        """Called first, with the temporary output folder (for scratch files)."""

    def assign(self) -> Tuple[Dict[NodeType, np.ndarray], Dict[str, float]]:
        """The partition of every node per type, and seconds per assigner step."""

    def order_edges(self, edge_type: EdgeType, nodes: Nodes) -> EdgeMap:
        """One edge type in CSC order of new destination ids."""

    def copy_rows(self, nodes: Nodes, edges: Edges) -> None:
        """Moves node and edge data to their partitions (streaming sources)."""

    def pieces(self, part: int, nodes: Nodes, edges: Edges) -> PartPieces:
        """What partition ``part`` is made of."""

    def halo_rows(self, part: int, halo: PartHalo, nodes: Nodes
                  ) -> Dict[NodeType, Dict[str, Array]]:
        """Rows of the attributes stored for halo nodes, per halo node type."""

    def close(self) -> None:
        """Called after the last partition is written (drops scratch files)."""


@dataclass(frozen=True)
class RunOptions:
    """What the driver needs beyond the stages.

    Args:
        num_parts (int): number of partitions.
        root (Path): output folder.
        overwrite (bool): replace an existing non-empty ``root``.
        method (str): the ``method`` recorded in META.
        seed (int): the seed recorded in META.
        progress (bool): report steps on ``stderr``.
    """
    num_parts: int
    root: Path
    overwrite: bool
    method: str
    seed: int
    progress: bool


def run_pipeline(stages: Stages, options: RunOptions
                 ) -> Tuple[PartitionMeta, PartitionTimings]:
    """Runs every step of ``stages`` and writes ``options.root``; returns META and timings."""
    start, laps, P = time.perf_counter(), Laps(), options.num_parts
    with files.atomic_dir(options.root, overwrite=options.overwrite) as tmp:
        stages.open(tmp)
        with step("assigning nodes to partitions", enabled=options.progress):
            parts, phases = stages.assign()
        laps.lap("assign")
        nodes = {t: NodeOrder.from_parts(p, P) for t, p in parts.items()}
        parts.clear()
        laps.lap("relabel")
        edges = {et: stages.order_edges(et, nodes) for et in _bar(
            stages.schema.edge_types, "ordering edges", options.progress)}
        laps.lap("order_edges")
        if stages.copies_rows:
            with step("copying node and edge data", enabled=options.progress):
                stages.copy_rows(nodes, edges)
            laps.lap("copy_rows")
        meta = graph_meta(stages.schema, P, {t: o.offsets for t, o in nodes.items()},
                          {et: o.offsets for et, o in edges.items()}, options.method,
                          options.seed)
        uid = partition_uid(meta.to_json(), [part_digest(*part_ids(p, nodes, edges))
                                             for p in range(P)])
        laps.lap("uid")
        stats = [_write(tmp, p, stages, nodes, edges, uid)
                 for p in _bar(range(P), "writing partitions", options.progress)]
        meta = replace(meta, parts=tuple(stats), uid=uid)
        io.save_json(meta.to_json(), tmp / io.META_FILE)
        del edges
        stages.close()
    laps.lap("write")
    timings = PartitionTimings(time.perf_counter() - start, phases.get("metis", 0.0),
                               {**phases, **laps.phases_s})
    return meta, timings


def _write(tmp: Path, part: int, stages: Stages, nodes: Nodes, edges: Edges,
           uid: str) -> PartStats:
    pieces = stages.pieces(part, nodes, edges)
    offsets = {t: o.offsets for t, o in nodes.items()}
    halo = part_halo(stages.schema, part, pieces, offsets)
    return write_part(tmp, part, stages.schema, pieces, offsets, halo,
                      stages.halo_rows(part, halo, nodes), uid)


def _bar(items: Iterable, desc: str, enabled: bool) -> Iterable:
    return track(items, desc, enabled=enabled)
