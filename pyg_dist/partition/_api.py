"""The one library entry of partitioning: :func:`partition` picks the mode itself.

``partition(source, out, num_parts, ...)`` runs the partition pipeline on a
``Data``/``HeteroData`` or a chunked graph folder, in memory, out of core (a chunked
folder with ``memory_budget``) or with every rank of a ``torchrun`` job taking a share
(``WORLD_SIZE`` > 1, or a :class:`~pyg_dist.partition._distributed.ArrayComm` of several
ranks). Options a mode cannot run fail the same way in every mode
(:mod:`pyg_dist.partition._options`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Union

import torch.distributed as dist
from torch_geometric.data import Data, HeteroData

from pyg_dist.chunked import ChunkedGraph
from pyg_dist.chunked._assemble import to_data
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.partition._common import PartitionTimings
from pyg_dist.datasets._errors import MissingDependencyError
from pyg_dist.partition._distributed import ArrayComm, DistPartitioner
from pyg_dist.partition._distributed.launch import join_ranks
from pyg_dist.partition._options import (MODES, PartitionOptionError, PartitionOptions,
                                        check_options)
from pyg_dist.partition._outofcore import OutOfCorePartitioner, parse_size
from pyg_dist.partition._partitioner import Partitioner

Source = Union[Data, HeteroData, ChunkedGraph, str, Path]


@dataclass
class PartitionResult:
    """What :func:`partition` did.

    Args:
        meta (PartitionMeta): the written partitioning's META.
        timings (PartitionTimings): seconds per step.
        mode (str): ``"memory"``, ``"out_of_core"`` or ``"multi_machine"``.
        world (int): ranks that took part.
    """
    meta: PartitionMeta
    timings: Optional[PartitionTimings]
    mode: str
    world: int = 1


def env_world_size() -> int:
    """``WORLD_SIZE`` as ``torchrun`` sets it (1 when unset or not a number)."""
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        return 1


def choose_mode(source: Source, memory_budget: Any = None, world: Optional[int] = None) -> str:
    """The mode :func:`partition` runs ``source`` in.

    Several ranks (``world``, default ``WORLD_SIZE``) -> ``"multi_machine"``; a chunked
    folder with ``memory_budget`` -> ``"out_of_core"``; anything else -> ``"memory"``.

    Raises:
        PartitionOptionError: several ranks with a graph in memory.
    """
    return _mode(isinstance(source, (Data, HeteroData)), memory_budget, world)


def _mode(in_memory: bool, memory_budget: Any, world: Optional[int]) -> str:
    if (env_world_size() if world is None else world) > 1:
        if in_memory:
            raise PartitionOptionError(
                "multi-machine partitioning (several ranks) reads a chunked graph folder on "
                "every rank, not a graph in memory: pass --input DIR (pyg-dist-chunk writes "
                "one)")
        return "multi_machine"
    return "out_of_core" if memory_budget is not None and not in_memory else "memory"


def check_request(options: PartitionOptions, in_memory: bool, world: Optional[int] = None
                  ) -> str:
    """What :func:`partition` checks first, without a source at hand (so a command line
    fails before loading anything): the mode a source held in memory (``in_memory``)
    or a chunked folder would run in, with ``options`` checked for it.

    Raises:
        PartitionOptionError: as :func:`partition` would.
    """
    mode = _mode(in_memory, options.memory_budget, world)
    check_options(options, mode, in_memory)
    return mode


def partition(source: Source, out: Union[str, Path], num_parts: int, method: str = "metis",
              *, seed: int = 0, memory_budget: Union[int, str, None] = None,
              coarsen: Optional[bool] = None, recursive: Optional[bool] = None,
              assignment: Any = None, overwrite: bool = False,
              halo_attrs: Iterable[str] = ("time",), progress: bool = True,
              allow_external_paths: bool = False, comm: Optional[ArrayComm] = None,
              mode: Optional[str] = None) -> PartitionResult:
    """Partitions ``source`` into ``num_parts`` partitions under ``out``.

    Args:
        source (Data, HeteroData, ChunkedGraph, str or Path): the graph, or a chunked
            graph folder (DGL's chunked format).
        out (str or Path): output folder; must be absent or empty unless ``overwrite``.
        num_parts (int): number of partitions.
        method (str): ``"metis"``, ``"kaminpar"``, ``"random"`` or ``"given"`` (see
            :class:`~pyg_dist.partition.Partitioner`).
        seed, coarsen, recursive, assignment, overwrite, halo_attrs, progress: as
            :class:`~pyg_dist.partition.Partitioner` takes them.
        memory_budget (int or str, optional): with a chunked folder, partition out of
            core holding at most this many bytes (``"4GB"``) beyond a few per node; each
            rank's budget in a multi-machine run (default ``"1GB"`` there).
        allow_external_paths (bool): read chunk files outside the folder too.
        comm (ArrayComm, optional): the ranks of a multi-machine run (default: the default
            process group's, which must be initialised when ``WORLD_SIZE`` > 1).
        mode (str, optional): force a mode (default: :func:`choose_mode`).

    Raises:
        PartitionOptionError: an option the mode cannot run (one message, whichever
            mode refuses it); ``ValueError`` for other bad input.
    """
    options = PartitionOptions(method, seed, coarsen, recursive, assignment, memory_budget,
                               allow_external_paths)
    in_memory = isinstance(source, (Data, HeteroData))
    if mode is None:
        mode = check_request(options, in_memory, comm.world if comm is not None else None)
    else:
        check_options(options, mode, in_memory)
    common = dict(method=method, seed=seed, overwrite=overwrite, halo_attrs=halo_attrs,
                  progress=progress)
    if mode == "multi_machine":
        return _multi_machine(source, out, num_parts, options, common, comm)
    return _one_machine(source, out, num_parts, options, common, mode)


def _one_machine(source: Source, out: Union[str, Path], num_parts: int,
                 options: PartitionOptions, common: dict, mode: str) -> PartitionResult:
    """In memory (a folder is assembled first) or out of core."""
    given = dict(coarsen=options.coarsen, recursive=options.recursive,
                 assignment=options.assignment)
    if mode == "out_of_core":
        part = OutOfCorePartitioner(source, num_parts, out, options.memory_budget,
                                    allow_external_paths=options.allow_external_paths,
                                    **given, **common)
        return PartitionResult(part.generate(), part.timings, mode)
    data = source if isinstance(source, (Data, HeteroData)) else to_data(
        source if isinstance(source, ChunkedGraph) else
        ChunkedGraph.open(source, options.allow_external_paths))
    part = Partitioner(data, num_parts, out, **given, **common)
    del data
    return PartitionResult(part.generate(), part.timings, mode)


def _multi_machine(source: Source, out: Union[str, Path], num_parts: int,
                   options: PartitionOptions, common: dict, comm: Optional[ArrayComm]
                   ) -> PartitionResult:
    """Every rank opens the input (a failure on one stops all), then partitions."""
    if isinstance(source, (Data, HeteroData)):
        choose_mode(source, world=2)  # raises: a graph in memory
    budget = options.memory_budget or DEFAULT_RANK_BUDGET
    if isinstance(budget, str):
        parse_size(budget)  # a bad one fails before the ranks join
    if comm is None:
        comm = ArrayComm(dist.get_rank(), dist.get_world_size()) if dist.is_initialized() \
            else join_ranks()
    part, error = None, None
    try:
        part = DistPartitioner(source, num_parts, out, budget, comm=comm,
                               allow_external_paths=options.allow_external_paths, **common)
    except (ValueError, MissingDependencyError) as exc:
        error = exc
    comm.check("opening the input", error)
    return PartitionResult(part.generate(), part.timings, "multi_machine", comm.world)


#: ``memory_budget`` of each rank of a multi-machine run when none is given
DEFAULT_RANK_BUDGET = "1GB"

__all__ = ["partition", "choose_mode", "check_request", "PartitionResult", "MODES",
           "DEFAULT_RANK_BUDGET"]
