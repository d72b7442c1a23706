"""Partitioning options and the modes that run them: one table, one message per refusal.

A partitioning runs in one of three modes, chosen from the source and the environment
(:func:`pyg_dist.partition.partition`):

- ``memory``: a ``Data``/``HeteroData`` (or a chunked folder assembled in memory);
- ``out_of_core``: a chunked folder with a memory budget, on one machine;
- ``multi_machine``: a chunked folder, every rank of a ``torchrun`` job taking a share.

Every option works in every mode, except the combinations :data:`REFUSED` lists; each
of those fails with one ``ValueError`` (:func:`check_options`), before any work. Options
that read a folder (:data:`FOLDER_ONLY`) fail the same way for a graph in memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from pyg_dist.errors import PygDistError
from pyg_dist.partition._assigners import METHODS

MODES = ("memory", "out_of_core", "multi_machine")


class PartitionOptionError(ValueError, PygDistError):
    """An option (or a combination) the chosen mode cannot run; one line naming it."""


@dataclass(frozen=True)
class PartitionOptions:
    """Every option of a partitioning, as :func:`pyg_dist.partition.partition` takes it.

    Args:
        method (str): ``"metis"``, ``"kaminpar"``, ``"random"`` or ``"given"``.
        seed (int): seed of every random choice.
        coarsen (bool, optional): METIS on a label-propagation clustering.
        recursive (bool, optional): METIS's algorithm (recursive bisection or k-way).
        assignment (Tensor or dict, optional): with ``method="given"``.
        memory_budget (int or str, optional): bytes the streaming steps may hold.
        allow_external_paths (bool): read chunk files outside the input folder.
    """
    method: str = "metis"
    seed: int = 0
    coarsen: Optional[bool] = None
    recursive: Optional[bool] = None
    assignment: Any = None
    memory_budget: Any = None
    allow_external_paths: bool = False


#: (option, mode) -> why that mode refuses it (the modes listed run it as the others do)
REFUSED: Dict[Tuple[str, str], str] = {
    ("method=kaminpar", "multi_machine"): "KaMinPar needs the whole graph in one process",
    ("method=given", "multi_machine"): "a given assignment would be held whole by every rank",
    ("coarsen=False", "multi_machine"): "plain METIS needs the whole graph in one process "
                                        "(multi-machine METIS always runs on the clustering)",
    ("recursive", "multi_machine"): "METIS runs on the cluster graph with pymetis's default "
                                    "algorithm there",
}
#: options that need a chunked folder source (refused for a graph in memory, any mode)
FOLDER_ONLY = {"memory_budget": "memory_budget applies to a chunked graph folder source "
                                "(--input DIR), not a graph in memory",
               "allow_external_paths": "allow_external_paths applies to a chunked graph "
                                       "folder source (--input DIR)"}


def method_label(method: str, recursive: Optional[bool]) -> str:
    """The ``method`` recorded in META: ``metis``, ``metis-recursive``, ``metis-kway``,
    ``kaminpar``, ``random`` or ``given``."""
    return method if recursive is None else f"{method}-{'recursive' if recursive else 'kway'}"


def refusal(option: str, mode: str) -> str:
    """The one message for ``option`` refused in ``mode`` (see :data:`REFUSED`)."""
    return f"{option} is not available for {mode.replace('_', '-')} partitioning: " \
           f"{REFUSED[(option, mode)]}"


def active(options: PartitionOptions) -> Tuple[str, ...]:
    """The options set away from their defaults, named as :data:`REFUSED` names them."""
    names = [f"method={options.method}"]
    if options.coarsen is not None:
        names.append(f"coarsen={options.coarsen}")
    for name in ("recursive", "assignment", "memory_budget"):
        if getattr(options, name) is not None:
            names.append(name)
    if options.allow_external_paths:
        names.append("allow_external_paths")
    return tuple(names)


def check_options(options: PartitionOptions, mode: str, in_memory: bool = False) -> None:
    """Raises :class:`PartitionOptionError` (one line) for an unknown method, options
    that do not go together, an option ``mode`` refuses, or (``in_memory``: the source is
    a ``Data``/``HeteroData``) one that needs a folder; the same text in every mode.
    """
    method = options.method
    if mode not in MODES:
        raise PartitionOptionError(f"unknown partition mode '{mode}' (choose from {MODES})")
    if method not in METHODS:
        raise PartitionOptionError(f"unknown partition method '{method}' (choose from "
                                   f"{METHODS})")
    if options.coarsen and method != "metis":
        raise PartitionOptionError(f"coarsen=True applies to method='metis', not '{method}'")
    if options.recursive is not None and method != "metis":
        raise PartitionOptionError(f"recursive={options.recursive} applies to "
                                   f"method='metis', not '{method}'")
    if options.assignment is not None and method != "given":
        raise PartitionOptionError(f"assignment= is used with method='given', not '{method}'")
    if method == "given" and options.assignment is None:
        raise PartitionOptionError("method='given' needs assignment= (the partition id of "
                                   "every node)")
    for name in active(options):
        if (name, mode) in REFUSED:
            raise PartitionOptionError(refusal(name, mode))
        if in_memory and name in FOLDER_ONLY:
            raise PartitionOptionError(FOLDER_ONLY[name])
