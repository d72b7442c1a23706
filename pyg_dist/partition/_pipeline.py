"""The one partition pipeline: a driver that runs the same steps over any graph source.

Steps: assign (an assigner from :mod:`pyg_dist.partition._assigners`) -> relabel (new ids
contiguous per partition, :class:`~pyg_dist.partition._common.NodeOrder`) -> order edges
(CSC of new destination ids; an edge belongs to its destination's partition) -> copy
rows (streaming sources only) -> META and ``uid`` (over every partition's id maps) ->
write the partitions (:mod:`pyg_dist.partition._writer`) into a temporary folder that
becomes the output at the end.

What differs between a ``Data`` in memory, a chunked folder out of core and a chunked
folder shared by the ranks of a ``torchrun`` job is how each step gets and keeps its
arrays: a :class:`Stages` implementation
(:class:`~pyg_dist.partition._in_memory.MemoryStages`,
:class:`~pyg_dist.partition._outofcore.outofcore_partitioner.OutOfCoreStages`,
:class:`~pyg_dist.partition._distributed.stages.DistStages`). Who runs the steps is a
:class:`Team`: one process that writes every partition (:data:`ONE_PROCESS`), or one
rank of several (:class:`~pyg_dist.partition._distributed.team.RankTeam`) that writes
its share, gathers what every partition contributes to META and ``uid`` from the
others, and finishes the output folder with them. Halo, statistics, META, uid and the
files come from one place, so equal assignments give equal bytes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import (Any, ContextManager, Dict, Iterator, List, Mapping, Protocol, Sequence,
                    Tuple, TypeVar)

import numpy as np

from pyg_dist.format import _files as files, _partition_io as io
from pyg_dist.format._identity import part_digest, partition_uid
from pyg_dist.format._meta import PartitionMeta, PartStats
from pyg_dist.partition._common import (GraphSchema, Laps, NodeOrder, PartitionTimings, Ranges,
                                       part_ids)
from pyg_dist._progress import step, track
from pyg_dist.partition._writer import Array, PartHalo, PartPieces, graph_meta, part_halo, \
    write_part
from pyg_dist._typing import EdgeType, NodeType

T = TypeVar("T")
Nodes = Mapping[NodeType, Ranges]
Edges = Mapping[EdgeType, Ranges]
HaloRows = Dict[NodeType, Dict[str, Array]]
Ids = Tuple[Dict[NodeType, np.ndarray], Dict[EdgeType, np.ndarray]]


class Stages(Protocol):
    """How one source runs the pipeline's steps (see the module docstring).

    ``schema`` is the graph's :class:`~pyg_dist.partition._common.GraphSchema`;
    ``copies_rows`` says whether :meth:`copy_rows` does anything (timed as
    ``copy_rows`` then). ``part`` below is always one the team has this process write.
    """
    schema: GraphSchema
    copies_rows: bool

    def open(self, tmp: Path) -> None:
        """Called first, with the temporary output folder (for scratch files)."""

    def assign(self) -> Tuple[Any, Dict[str, float]]:
        """The partition of every node this process reads (as :meth:`relabel` takes
        it), and seconds per assigner step."""

    def relabel(self, parts: Any) -> Nodes:
        """New ids of every node type (collective where the graph is shared)."""

    def order_edges(self, edge_type: EdgeType, nodes: Nodes) -> Ranges:
        """One edge type in CSC order of new destination ids."""

    def copy_rows(self, nodes: Nodes, edges: Edges) -> None:
        """Moves node and edge data to their partitions (streaming sources)."""

    def part_ids(self, part: int, nodes: Nodes, edges: Edges) -> Ids:
        """Original ids of the nodes partition ``part`` owns and of its edges."""

    def pieces(self, part: int, nodes: Nodes, edges: Edges) -> PartPieces:
        """What partition ``part`` is made of."""

    def halo(self, part: int, pieces: PartPieces, nodes: Nodes) -> Tuple[PartHalo, HaloRows]:
        """The halo of partition ``part`` and the rows of the attributes stored for halo
        nodes, per halo node type."""

    def close(self) -> None:
        """Called after the last partition is written (drops scratch files)."""


class WholeGraphStages:
    """What the :class:`Stages` of one process holding the whole graph share: new ids
    from the whole assignment, id maps and halos read from the whole graph's arrays.
    Subclasses set ``schema`` and ``num_parts`` and define :meth:`halo_rows`."""
    schema: GraphSchema
    num_parts: int

    def open(self, tmp: Path) -> None:
        pass

    def close(self) -> None:
        pass

    def relabel(self, parts: Dict[NodeType, np.ndarray]) -> Dict[NodeType, NodeOrder]:
        return {t: NodeOrder.from_parts(p, self.num_parts) for t, p in parts.items()}

    def part_ids(self, part: int, nodes: Nodes, edges: Edges) -> Ids:
        return part_ids(part, nodes, edges)

    def halo(self, part: int, pieces: PartPieces, nodes: Nodes) -> Tuple[PartHalo, HaloRows]:
        halo = part_halo(self.schema, part, pieces, _offsets(nodes))
        return halo, self.halo_rows(part, halo, nodes)

    def halo_rows(self, part: int, halo: PartHalo, nodes: Nodes) -> HaloRows:
        """Rows of the attributes stored for halo nodes, per halo node type."""
        raise NotImplementedError


class Team(Protocol):
    """Who runs the pipeline (see the module docstring).

    ``bars`` says whether the steps over items report each item (one process does
    them all) or one line when done (a rank does its share).
    """
    bars: bool

    def output(self, root: Path, overwrite: bool) -> ContextManager[Path]:
        """Enters the temporary output folder for ``root``; leaving it cleans up."""

    def parts(self, num_parts: int) -> Sequence[int]:
        """The partitions this process writes."""

    def gather(self, values: Dict[int, T], what: str) -> List[T]:
        """Every partition's value, in partition order, from the values of the
        partitions this process writes (collective; ``what`` names the step)."""

    def finish(self, tmp: Path, root: Path, meta: PartitionMeta) -> None:
        """Writes META and completes the output (before :meth:`output` is left)."""

    def reached(self, phase: str) -> None:
        """Called when the step ``phase`` is done (a seam: does nothing)."""


class OneProcess:
    """The :class:`Team` of a single process: it writes every partition, and its
    output folder is :func:`~pyg_dist.format._files.atomic_dir`."""
    bars = True

    def output(self, root: Path, overwrite: bool) -> ContextManager[Path]:
        return files.atomic_dir(root, overwrite=overwrite)

    def parts(self, num_parts: int) -> Sequence[int]:
        return range(num_parts)

    def gather(self, values: Dict[int, T], what: str) -> List[T]:
        return [values[p] for p in sorted(values)]

    def finish(self, tmp: Path, root: Path, meta: PartitionMeta) -> None:
        io.save_json(meta.to_json(), tmp / io.META_FILE)

    def reached(self, phase: str) -> None:
        pass


#: the team of every run in one process
ONE_PROCESS = OneProcess()


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


def run_pipeline(stages: Stages, options: RunOptions, team: Team = ONE_PROCESS
                 ) -> Tuple[PartitionMeta, PartitionTimings]:
    """Runs every step of ``stages`` with ``team`` and writes ``options.root``; returns
    META and timings."""
    start, laps = time.perf_counter(), Laps()
    with team.output(options.root, options.overwrite) as tmp:
        meta, phases = _run(tmp, stages, options, team, laps)
        team.finish(tmp, options.root, meta)
    laps.lap("write")
    timings = PartitionTimings(time.perf_counter() - start, phases.get("metis", 0.0),
                               {**phases, **laps.phases_s})
    return meta, timings


def _run(tmp: Path, stages: Stages, options: RunOptions, team: Team, laps: Laps
         ) -> Tuple[PartitionMeta, Dict[str, float]]:
    """Every step but the output folder's; META and the assigner's step times."""
    P, progress = options.num_parts, options.progress

    def done(phase: str) -> None:
        laps.lap(phase)
        team.reached(phase)

    stages.open(tmp)
    with step("assigning nodes to partitions", enabled=progress):
        parts, phases = stages.assign()
    done("assign")
    nodes = stages.relabel(parts)
    del parts
    done("relabel")
    edges = {et: stages.order_edges(et, nodes) for et in _each(
        stages.schema.edge_types, "ordering edges", progress, team.bars)}
    done("order_edges")
    if stages.copies_rows:
        with step("copying node and edge data", enabled=progress):
            stages.copy_rows(nodes, edges)
        done("copy_rows")
    mine = team.parts(P)
    meta = graph_meta(stages.schema, P, _offsets(nodes), _offsets(edges), options.method,
                      options.seed)
    digests = {p: part_digest(*stages.part_ids(p, nodes, edges)) for p in mine}
    uid = partition_uid(meta.to_json(), team.gather(digests, "hashing the partitions"))
    done("uid")
    stats = {p: _write(tmp, p, stages, nodes, edges, uid)
             for p in _each(mine, "writing partitions", progress, team.bars)}
    del edges
    stages.close()
    stats_all = team.gather(stats, "collecting partition statistics")
    return replace(meta, parts=tuple(stats_all), uid=uid), phases


def _write(tmp: Path, part: int, stages: Stages, nodes: Nodes, edges: Edges,
           uid: str) -> PartStats:
    pieces = stages.pieces(part, nodes, edges)
    halo, halo_rows = stages.halo(part, pieces, nodes)
    return write_part(tmp, part, stages.schema, pieces, _offsets(nodes), halo, halo_rows, uid)


def _offsets(ranges: Mapping[Any, Ranges]) -> Dict[Any, Tuple[int, ...]]:
    return {t: r.offsets for t, r in ranges.items()}


def _each(items: Sequence[T], desc: str, progress: bool, bars: bool) -> Iterator[T]:
    """``items``, reported item by item (``bars``) or by one line once all are done."""
    if bars:
        yield from track(items, desc, enabled=progress)
    else:
        with step(desc, enabled=progress):
            yield from items
