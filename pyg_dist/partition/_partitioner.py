"""Splitting a ``Data``/``HeteroData`` into ``num_parts`` partition folders.

:class:`Partitioner` is the pipeline (:mod:`pyg_dist.partition._pipeline`) configured
for a graph in memory (:class:`~pyg_dist.partition._in_memory.MemoryStages`): assign nodes
to partitions (METIS, KaMinPar, random, or a given assignment) -> relabel ids so each
partition owns one contiguous range per node type -> order each edge type by new
destination id (CSC; an edge belongs to the partition owning its destination, and edge
ids are relabelled to that order) -> hash the id maps and META's defining fields into
the partitioning's ``uid`` -> write every partition, the id maps and ``META.json``
into a temporary folder that is renamed into place at the end.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional, Union

from torch_geometric.data import Data, HeteroData

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.partition._assign import AssignOptions
from pyg_dist.partition._given import check_given
from pyg_dist.partition._common import PartitionTimings
from pyg_dist.partition._kaminpar_assign import kaminpar_module
from pyg_dist.partition._in_memory import MemoryStages
from pyg_dist.partition._options import PartitionOptions, check_options, method_label
from pyg_dist.partition._pipeline import RunOptions, run_pipeline
from pyg_dist.format._tables import GraphTables

__all__ = ["Partitioner", "PartitionTimings"]


class Partitioner:
    """Partitions a graph into ``num_parts`` folders under ``root``.

    Args:
        data (Data or HeteroData): the graph. Node attributes (any tensor with one row
            per node) and edge attributes (one row per edge) are split by owner;
            boolean ``<split>_mask`` node attributes also become per-partition id lists.
        num_parts (int): number of partitions (``1`` = standalone mode).
        root (str or Path): output folder; must be absent or empty unless ``overwrite``.
        method (str or bool): ``"metis"`` (default), ``"kaminpar"`` (KaMinPar, the
            optional ``kaminpar`` package: ``pip install 'pyg_dist[kaminpar]'``;
            see :mod:`pyg_dist.partition._kaminpar_assign`), ``"random"``, or
            ``"given"`` (use ``assignment`` as is). A bool here is taken as ``recursive``, so
            ``torch_geometric.distributed`` scripts calling
            ``Partitioner(data, num_parts, root, recursive)`` run unchanged.
        seed (int): seed for METIS and for the random assignment.
        overwrite (bool): replace an existing non-empty ``root``.
        halo_attrs (Iterable[str]): node attributes whose values are also stored for
            halo nodes (needed by temporal sampling on node time).
        progress (bool): report progress on ``stderr`` (a bar on a terminal, plain
            lines otherwise).
        coarsen (bool, optional): METIS on a label-propagation clustering of the graph
            rather than the graph itself: for graphs too large for METIS's memory (it
            needs about 8 times the adjacency); the cut is similar or a little larger.
            ``None`` (default): only when plain METIS would not fit in the memory
            available (a warning says so).
        recursive (bool, optional): METIS's algorithm, as in
            ``torch_geometric.distributed.Partitioner``: ``True`` multilevel recursive
            bisection (META's ``method`` reads ``"metis-recursive"``), ``False``
            multilevel k-way (``"metis-kway"``). ``None`` (default) keeps pymetis's
            own choice, recursive bisection up to 8 partitions and k-way above, with
            ``method`` ``"metis"`` (so earlier partitionings keep their ``uid``).
        assignment (Tensor or dict, optional): with ``method="given"``, the partition
            id of every node (a dict of them by node type for ``HeteroData``), used
            as is; it must have one entry per node, ids in ``[0, num_parts)`` and no
            empty partition. Relabelling and everything after is the same as for
            the other methods.

    Example:
        >>> meta = Partitioner(data, num_parts=2, root="out").generate()
    """

    def __init__(self, data: Union[Data, HeteroData], num_parts: int,
                 root: Union[str, Path], method: Union[str, bool] = "metis", seed: int = 0,
                 overwrite: bool = False, halo_attrs: Iterable[str] = ("time",),
                 progress: bool = True, coarsen: Optional[bool] = None,
                 recursive: Optional[bool] = None, assignment: Any = None) -> None:
        if isinstance(method, bool):  # PyG's positional `recursive`
            if recursive is not None and recursive != method:
                raise ValueError(f"recursive given twice: {method} (4th argument) and "
                                 f"recursive={recursive}")
            method, recursive = "metis", method
        check_options(PartitionOptions(method, seed, coarsen, recursive, assignment), "memory")
        if method == "kaminpar":  # missing: one-line ImportError before any work
            kaminpar_module()
        if not isinstance(num_parts, int) or num_parts < 1:
            raise ValueError(f"num_parts must be an integer >= 1, got {num_parts!r}")
        self.tables = GraphTables.from_data(data)
        if num_parts > self.tables.total_nodes:
            raise ValueError(f"num_parts={num_parts} is larger than the number of nodes "
                             f"({self.tables.total_nodes})")
        self.num_parts = num_parts
        self.root = Path(root)
        self.method = method
        self.seed = seed
        self.overwrite = overwrite
        self.halo_attrs = tuple(halo_attrs)
        self.progress = progress
        self.coarsen = coarsen
        self.recursive = recursive
        self.assignment = assignment
        if method == "given":  # checked now, so a bad one fails before anything runs
            check_given(self.tables.num_nodes, self.tables.is_hetero, num_parts, assignment)
        self.timings: Optional[PartitionTimings] = None

    @property
    def method_name(self) -> str:
        """The ``method`` recorded in META: ``metis``, ``metis-recursive``,
        ``metis-kway``, ``random`` or ``given``."""
        return method_label(self.method, self.recursive)

    def generate_partition(self) -> PartitionMeta:
        """Same as :meth:`generate` (the name ``torch_geometric.distributed`` uses)."""
        return self.generate()

    def generate(self) -> PartitionMeta:
        """Writes the partitions and returns their :class:`PartitionMeta`."""
        options = AssignOptions(self.method, self.seed, self.coarsen, self.recursive,
                                self.assignment)
        stages = MemoryStages(self.tables, self.num_parts, options, self.halo_attrs)
        meta, self.timings = run_pipeline(stages, RunOptions(
            self.num_parts, self.root, self.overwrite, self.method_name, self.seed,
            self.progress))
        return meta
