"""Splitting a ``Data``/``HeteroData`` into ``num_parts`` partition folders (format v1).

Steps: assign nodes to partitions (METIS, random, or a given assignment) -> relabel ids so each
partition owns one contiguous range per node type -> order each edge type by new
destination id (CSC; an edge belongs to the partition owning its destination, and
edge ids are relabelled to that order) -> hash the id maps and META's defining fields
into the partitioning's ``uid`` -> write every partition (each ``graph.pt`` carries the
uid; each ``MANIFEST.json`` the size and digest of its files), the id maps and
``META.json`` into a temporary folder that is renamed into place at the end.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.format import io
from pyg_dist.partition.assign import METHODS, assign, check_given
from pyg_dist.format.identity import part_digest, partition_uid
from pyg_dist.partition.kernels import csc_order, gather_sources, outside_nodes
from pyg_dist.format.digest import ALGORITHM
from pyg_dist.format.meta import AttrSpec, PartitionMeta, PartStats
from pyg_dist.partition.progress import track
from pyg_dist.format.schema import dtype_name
from pyg_dist.partition.tables import GraphTables
from pyg_dist.typing import EdgeType, NodeType, edge_key


@dataclass
class NodeOrder:
    """New ids of one node type: ``new_to_old[new] = old`` and partition offsets."""
    new_to_old: np.ndarray
    old_to_new: np.ndarray
    offsets: Tuple[int, ...]

    @classmethod
    def from_parts(cls, parts: np.ndarray, num_parts: int) -> "NodeOrder":
        new_to_old = np.argsort(parts, kind="stable").astype(np.int64)
        old_to_new = np.empty_like(new_to_old)
        old_to_new[new_to_old] = np.arange(new_to_old.size, dtype=np.int64)
        counts = np.bincount(parts, minlength=num_parts)
        offsets = tuple(int(x) for x in np.concatenate([[0], np.cumsum(counts)]))
        return cls(new_to_old, old_to_new, offsets)


@dataclass
class EdgeOrder:
    """One edge type in CSC order of new destination ids (global edge id = position).

    New source ids are not held for the whole graph; each partition gathers its own.
    """
    indptr: np.ndarray
    order: np.ndarray
    offsets: Tuple[int, ...]


@dataclass
class PartitionTimings:
    """Where :meth:`Partitioner.generate` spent its time (seconds).

    Args:
        total_s: the whole of :meth:`Partitioner.generate`.
        metis_s: the ``pymetis.part_graph`` call only (``0`` for the random method).
        phases_s: seconds per step: ``assign`` (for METIS the sum of ``adjacency``,
            ``metis`` and ``balance``), ``relabel``, ``order_edges``, ``uid`` (hashing
            the id maps), ``write``.
    """
    total_s: float
    metis_s: float
    phases_s: Dict[str, float] = field(default_factory=dict)


class _Laps:
    """Accumulates the seconds between successive :meth:`lap` calls by name."""

    def __init__(self) -> None:
        self.phases_s: Dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases_s[name] = self.phases_s.get(name, 0.0) + now - self._last
        self._last = now


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
            see :mod:`pyg_dist.partition.kaminpar_assign`), ``"random"``, or
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
        _check_options(method, coarsen, recursive, assignment)
        if method == "kaminpar":  # missing: one-line ImportError before any work
            from pyg_dist.partition.kaminpar_assign import kaminpar_module
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
            check_given(self.tables, num_parts, assignment)
        self.timings: Optional[PartitionTimings] = None

    @property
    def method_name(self) -> str:
        """The ``method`` recorded in META: ``metis``, ``metis-recursive``,
        ``metis-kway``, ``random`` or ``given``."""
        if self.recursive is None:
            return self.method
        return f"{self.method}-{'recursive' if self.recursive else 'kway'}"

    def generate_partition(self) -> PartitionMeta:
        """Same as :meth:`generate` (the name ``torch_geometric.distributed`` uses)."""
        return self.generate()

    def generate(self) -> PartitionMeta:
        """Writes the partitions and returns their :class:`PartitionMeta`."""
        start = time.perf_counter()
        tables = self.tables
        laps = _Laps()
        assignment = assign(tables, self.num_parts, self.method, self.seed, self.coarsen,
                            self.recursive, self.assignment)
        laps.lap("assign")
        nodes = {t: NodeOrder.from_parts(assignment.parts[t], self.num_parts)
                 for t in tables.num_nodes}
        assignment.parts.clear()
        laps.lap("relabel")
        with io.atomic_dir(self.root, overwrite=self.overwrite) as tmp:
            edges = {et: self._order_edges(et, nodes) for et in self._bar(
                tables.edge_index, "ordering edges")}
            laps.lap("order_edges")
            meta = self._meta(nodes, edges)
            uid = partition_uid(meta.to_json(), [part_digest(*self._part_ids(p, nodes, edges))
                                                 for p in range(self.num_parts)])
            laps.lap("uid")
            stats = [self._write_part(tmp, p, nodes, edges, uid)
                     for p in self._bar(range(self.num_parts), "writing partitions")]
            meta = replace(meta, parts=tuple(stats), uid=uid)
            io.save_json(meta.to_json(), tmp / io.META_FILE)
        laps.lap("write")
        self.timings = PartitionTimings(time.perf_counter() - start, assignment.metis_s,
                                        {**assignment.phases_s, **laps.phases_s})
        return meta

    # ---- steps ---------------------------------------------------------------------
    def _bar(self, items: Iterable, desc: str) -> Iterable:
        return track(items, desc, enabled=self.progress)

    def _order_edges(self, edge_type: EdgeType, nodes: Dict[NodeType, NodeOrder]) -> EdgeOrder:
        dst_order = nodes[edge_type[2]]
        indptr, order = csc_order(self.tables.edge_index[edge_type][1].numpy(),
                                  dst_order.old_to_new, self.tables.num_nodes[edge_type[2]])
        offsets = tuple(int(indptr[o]) for o in dst_order.offsets)
        return EdgeOrder(indptr, order, offsets)

    def _write_part(self, tmp: Path, part: int, nodes: Dict[NodeType, NodeOrder],
                    edges: Dict[EdgeType, EdgeOrder], uid: str) -> PartStats:
        csc, edge_feats, halo, n_edges, n_cut = self._part_edges(part, nodes, edges)
        node_feats, splits, halo_attrs = self._part_nodes(part, nodes, halo)
        node_ids, edge_ids = self._part_ids(part, nodes, edges)
        io.write_part(tmp, part, {"csc": csc, "halo": halo, "halo_attrs": halo_attrs, "uid": uid},
                      node_feats, edge_feats, splits,
                      {t: torch.from_numpy(v) for t, v in node_ids.items()},
                      {edge_key(t): torch.from_numpy(v) for t, v in edge_ids.items()},
                      self.tables.is_hetero)
        return PartStats(
            owned_nodes={t: o.offsets[part + 1] - o.offsets[part] for t, o in nodes.items()},
            halo_nodes={t: int(halo[t].numel()) if t in halo else 0 for t in nodes},
            edges=n_edges, cut_edges=n_cut,
            train_nodes=sum(int(s["train"].numel()) for s in splits.values() if "train" in s))

    @staticmethod
    def _part_ids(part: int, nodes: Dict[NodeType, NodeOrder],
                  edges: Dict[EdgeType, EdgeOrder]) -> tuple:
        """Original ids of the nodes partition ``part`` owns and of its edges (views)."""
        return ({t: o.new_to_old[o.offsets[part]:o.offsets[part + 1]] for t, o in nodes.items()},
                {t: o.order[o.offsets[part]:o.offsets[part + 1]] for t, o in edges.items()})

    def _part_edges(self, part: int, nodes: Dict[NodeType, NodeOrder],
                    edges: Dict[EdgeType, EdgeOrder]) -> tuple:
        """CSC slices, edge attributes, halo ids and edge counts of one partition."""
        csc, edge_feats, halo_sets, n_edges, n_cut = {}, {}, {}, {}, {}
        for et, eo in edges.items():
            lo, hi = nodes[et[2]].offsets[part], nodes[et[2]].offsets[part + 1]
            e_lo, e_hi = eo.offsets[part], eo.offsets[part + 1]
            indices = gather_sources(self.tables.edge_index[et][0].numpy(),
                                     nodes[et[0]].old_to_new, eo.order[e_lo:e_hi])
            csc[edge_key(et)] = {"indptr": torch.from_numpy(eo.indptr[lo:hi + 1] - e_lo),
                                 "indices": torch.from_numpy(indices)}
            src_lo, src_hi = nodes[et[0]].offsets[part], nodes[et[0]].offsets[part + 1]
            n_edges[et] = e_hi - e_lo
            outside, cut = outside_nodes(indices, src_lo, src_hi, self.tables.num_nodes[et[0]])
            n_cut[et] = int(cut)
            halo_sets.setdefault(et[0], []).append(torch.from_numpy(outside))
            rows = torch.from_numpy(eo.order[e_lo:e_hi])
            edge_feats[edge_key(et)] = {k: v[rows] for k, v in self.tables.edge_attrs[et].items()}
        halo = {t: torch.unique(torch.cat(v)) for t, v in halo_sets.items()}
        return csc, edge_feats, halo, n_edges, n_cut

    def _part_nodes(self, part: int, nodes: Dict[NodeType, NodeOrder],
                    halo: Dict[NodeType, Tensor]) -> tuple:
        """Node attributes, split id lists and halo attributes of one partition."""
        node_feats, splits, halo_attrs = {}, {}, {}
        for t, order in nodes.items():
            lo, hi = order.offsets[part], order.offsets[part + 1]
            rows = torch.from_numpy(order.new_to_old[lo:hi])
            attrs = self.tables.node_attrs[t]
            node_feats[t] = {k: v[rows] for k, v in attrs.items()}
            splits[t] = {name: torch.nonzero(mask[rows]).view(-1) + lo
                         for name, mask in self.tables.masks(t).items()}
            if t in halo:
                halo_rows = torch.from_numpy(order.new_to_old[halo[t].numpy()])
                halo_attrs[t] = {k: v[halo_rows] for k, v in attrs.items()
                                 if k in self.halo_attrs}
        return node_feats, splits, halo_attrs

    def _meta(self, nodes: Dict[NodeType, NodeOrder],
              edges: Dict[EdgeType, EdgeOrder]) -> PartitionMeta:
        """The META of this partitioning, without per-partition statistics and uid."""
        tables = self.tables

        def spec(value: Tensor) -> AttrSpec:
            return AttrSpec(dtype_name(value.dtype), tuple(value.shape[1:]))

        splits = sorted({s for t in tables.num_nodes for s in tables.masks(t)})
        return PartitionMeta(
            num_parts=self.num_parts, is_hetero=tables.is_hetero,
            node_types=tuple(tables.num_nodes), edge_types=tuple(tables.edge_index),
            num_nodes=dict(tables.num_nodes),
            num_edges={et: int(i.size(1)) for et, i in tables.edge_index.items()},
            node_offsets={t: o.offsets for t, o in nodes.items()},
            edge_offsets={t: o.offsets for t, o in edges.items()},
            node_attrs={t: {k: spec(v) for k, v in a.items()}
                        for t, a in tables.node_attrs.items()},
            edge_attrs={t: {k: spec(v) for k, v in a.items()}
                        for t, a in tables.edge_attrs.items()},
            splits=tuple(splits), method=self.method_name, seed=self.seed, digests=ALGORITHM)


def _check_options(method: str, coarsen: Optional[bool], recursive: Optional[bool],
                   assignment: Any) -> None:
    """Raises ``ValueError`` for an unknown method or options it does not take."""
    if method not in METHODS:
        raise ValueError(f"unknown partition method '{method}' (choose from {METHODS})")
    if coarsen and method != "metis":
        raise ValueError(f"coarsen=True applies to method='metis', not '{method}'")
    if recursive is not None and method != "metis":
        raise ValueError(f"recursive={recursive} applies to method='metis', not '{method}'")
    if assignment is not None and method != "given":
        raise ValueError(f"assignment= is used with method='given', not '{method}'")
