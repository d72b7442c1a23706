"""Partitioning a chunked graph on several machines: one rank per machine (or more),
started by ``torchrun``; the output is the same format as every other partitioner's.

:class:`DistPartitioner` runs the one pipeline (:mod:`pyg_dist.partition._pipeline`) on
every rank, with the rank's stages
(:class:`~pyg_dist.partition._distributed.stages.DistStages`) and the ranks as its team
(:class:`~pyg_dist.partition._distributed.team.RankTeam`). Each rank reads a contiguous
run of every edge type's chunk files and is the *home* of a contiguous range of node
ids (all node types in one id space): it holds arrays for those nodes only. The steps,
each a series of bounded all-to-all rounds over the gloo group:

1. assign (:mod:`.assign`): local neighbour lists, label propagation with ghost labels
   exchanged, the cluster graph gathered on rank 0 for METIS (in a child process), the
   result handed back, refinement and balancing (``method="random"``: balanced dealing);
2. relabel: new ids contiguous per partition, in original id order within it (as
   :class:`~pyg_dist.partition._partitioner.NodeOrder` numbers them);
3. edges go to the rank writing their destination's partition, which puts them in
   CSC order (ties in original edge order, as the other partitioners do);
4. node and edge data rows go from the rank reading them to the writer of their
   partition, block by block; halo rows are asked from their owners' writers;
5. uid over every partition's digest; each rank writes the partitions it serves
   (partition ``p`` by rank ``p * world // num_parts``), and ``META.json`` is written
   next to them.

Output folders: every rank writes into a hidden temporary folder beside ``--out``.
When the ranks are done, the lowest rank that can see another rank's folder (the same
file system: one machine, or a shared one) moves that rank's partitions into its own
folder, writes ``META.json`` and renames the folder to ``--out``. On machines that
share no file system, each machine's ``--out`` holds ``META.json`` and the partitions
its ranks wrote: what its trainers load. A failure on any rank, or a rank that dies,
stops every rank before anything is renamed, so ``--out`` is absent (or as it was)
or complete, never half written.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, Optional, Union

from pyg_dist.chunked import ChunkedGraph
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.partition._common import PartitionTimings
from pyg_dist.partition._distributed.comm import ArrayComm
from pyg_dist.partition._distributed.stages import DistStages
from pyg_dist.partition._distributed.team import RankTeam
from pyg_dist.partition._options import PartitionOptions, check_options
from pyg_dist.partition._outofcore.budget import DIST_BYTES_PER_NODE
from pyg_dist.partition._outofcore.source import open_source
from pyg_dist.partition._pipeline import RunOptions, run_pipeline


class DistPartitioner:
    """Partitions a chunked graph folder with every rank of the job taking a share.

    Collective: every rank constructs it with the same options (they are checked)
    and calls :meth:`generate`. With one rank it runs the same steps in one process.

    Args:
        input (str, Path or ChunkedGraph): the chunked graph; every rank reads the
            same folder (a shared file system, or the same copy on every machine).
        num_parts (int): number of partitions.
        root (str or Path): output folder (see the module docstring).
        memory_budget (int or str): bytes each rank may hold beyond its node arrays.
        comm (ArrayComm): the ranks (default: one rank).
        method (str): ``"metis"`` (label propagation + METIS on the cluster graph) or
            ``"random"``.
        seed (int): seed of every random choice.
        overwrite (bool): replace an existing non-empty ``root``.
        halo_attrs (Iterable[str]): node attributes also stored for halo nodes.
        progress (bool): report the steps on ``stderr`` (rank 0).
        allow_external_paths (bool): read chunk files outside the input folder too (see
            :meth:`~pyg_dist.chunked.ChunkedGraph.open`).
    """

    def __init__(self, input: Union[str, Path, ChunkedGraph], num_parts: int,
                 root: Union[str, Path], memory_budget: Union[int, str],
                 comm: Optional[ArrayComm] = None, method: str = "metis", seed: int = 0,
                 overwrite: bool = False, halo_attrs: Iterable[str] = ("time",),
                 progress: bool = True, allow_external_paths: bool = False) -> None:
        self.comm = comm or ArrayComm()
        check_options(PartitionOptions(method, seed, memory_budget=memory_budget,
                                       allow_external_paths=allow_external_paths),
                      "multi_machine")
        self.source, self.budget = open_source(input, num_parts, memory_budget,
                                               allow_external_paths, DIST_BYTES_PER_NODE,
                                               self.comm.world)
        self.num_parts, self.root, self.method, self.seed = num_parts, Path(root), method, seed
        self.overwrite, self.halo_attrs = overwrite, tuple(halo_attrs)
        self.progress = progress and self.comm.rank == 0
        self.timings: Optional[PartitionTimings] = None

    def _identity(self) -> Dict[str, object]:
        """What every rank must agree on: options and the input as each rank sees it."""
        src = self.source
        return {"num_parts": self.num_parts, "method": self.method, "seed": self.seed,
                "overwrite": self.overwrite, "halo_attrs": list(self.halo_attrs),
                "output folder name": self.root.name, "num_nodes": dict(src.num_nodes),
                "num_edges": {src.edge_names[et]: src.num_edges(et) for et in src.edge_names},
                "node data": {t: {k: str(v) for k, v in s.items()}
                              for t, s in src.node_specs.items()},
                "edge data": {src.edge_names[et]: {k: str(v) for k, v in s.items()}
                              for et, s in src.edge_specs.items()}}

    def generate(self) -> PartitionMeta:
        """Writes the partitions (collectively) and returns their :class:`PartitionMeta`."""
        team = RankTeam(self.comm, self._identity())
        stages = DistStages(self.source, self.budget, team, self.num_parts, self.method,
                            self.seed, self.halo_attrs)
        meta, self.timings = run_pipeline(stages, RunOptions(
            self.num_parts, self.root, self.overwrite, self.method, self.seed,
            self.progress), team)
        return meta
