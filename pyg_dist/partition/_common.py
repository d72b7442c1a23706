"""Pieces every partitioning mode shares: the graph's schema, type offsets, new node
ids, the id maps of one partition and the timing of the steps.

Each of these existed once per partitioner (in memory, out of core, multi-machine);
they are defined here once and imported by all of them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, Mapping, Protocol, Tuple

import numpy as np

from pyg_dist.format._meta import AttrSpec
from pyg_dist._typing import EdgeType, NodeType

Offsets = Dict[NodeType, Tuple[int, ...]]


class GraphSchema(Protocol):
    """What the pipeline's writer needs to know of a graph before reading any of it:
    types, counts and attribute specs. Both :class:`~pyg_dist.format._tables.GraphTables`
    (a ``Data``/``HeteroData`` in memory) and
    :class:`~pyg_dist.partition._outofcore.source.ChunkedSource` (a chunked folder)
    provide it.
    """
    is_hetero: bool
    num_nodes: Dict[NodeType, int]

    @property
    def edge_types(self) -> Tuple[EdgeType, ...]: ...

    @property
    def node_specs(self) -> Mapping[NodeType, Mapping[str, AttrSpec]]: ...

    @property
    def edge_specs(self) -> Mapping[EdgeType, Mapping[str, AttrSpec]]: ...

    def num_edges(self, edge_type: EdgeType) -> int: ...

    def mask_names(self, node_type: NodeType) -> Tuple[str, ...]: ...


def type_offsets(num_nodes: Mapping[NodeType, int]) -> Dict[NodeType, int]:
    """First id of every node type in the combined id space (types in order)."""
    offsets, total = {}, 0
    for node_type, n in num_nodes.items():
        offsets[node_type] = total
        total += n
    return offsets


def node_groups(num_nodes: Mapping[NodeType, int]) -> np.ndarray:
    """The node type index of every node of the combined id space."""
    return np.repeat(np.arange(len(num_nodes)), list(num_nodes.values()))


def split_by_type(values: np.ndarray, num_nodes: Mapping[NodeType, int]
                  ) -> Dict[NodeType, np.ndarray]:
    """``values`` over the combined id space, cut into one view per node type."""
    offsets = type_offsets(num_nodes)
    return {t: values[offsets[t]:offsets[t] + n] for t, n in num_nodes.items()}


@dataclass
class NodeOrder:
    """New ids of one node type: ``new_to_old[new] = old`` and partition offsets.

    Partition ``p`` owns new ids ``[offsets[p], offsets[p + 1])``, in original id order
    within it.
    """
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


class Ranges(Protocol):
    """New ids of one node or edge type by partition: partition ``p`` owns
    ``[offsets[p], offsets[p + 1])`` (all the pipeline's driver asks of a type)."""
    offsets: Tuple[int, ...]


class EdgeMap(Ranges, Protocol):
    """One edge type after ordering: ``edge_map[new global edge id] = original id``
    (an array or a memory map) and partition edge ``offsets``."""
    edge_map: np.ndarray


def plain(array: np.ndarray) -> np.ndarray:
    """``array`` as a plain ``ndarray`` view (numba and torch take memory maps this way)."""
    return array.view(np.ndarray) if isinstance(array, np.memmap) else array


def part_ids(part: int, nodes: Mapping[NodeType, NodeOrder], edges: Mapping[EdgeType, EdgeMap]
             ) -> Tuple[Dict[NodeType, np.ndarray], Dict[EdgeType, np.ndarray]]:
    """Original ids of the nodes partition ``part`` owns and of its edges (views)."""
    return ({t: o.new_to_old[o.offsets[part]:o.offsets[part + 1]] for t, o in nodes.items()},
            {t: plain(o.edge_map[o.offsets[part]:o.offsets[part + 1]])
             for t, o in edges.items()})


@dataclass
class PartitionTimings:
    """Where a partitioning spent its time (seconds).

    Args:
        total_s: the whole run.
        metis_s: the ``pymetis.part_graph`` call only (``0`` for the random method).
        phases_s: seconds per step: ``assign`` (for METIS the sum of ``adjacency``,
            ``metis`` and ``balance``), ``relabel``, ``order_edges``, ``copy_rows``
            (streaming modes), ``uid`` (hashing the id maps), ``write``.
    """
    total_s: float
    metis_s: float
    phases_s: Dict[str, float] = field(default_factory=dict)


class Laps:
    """Accumulates the seconds between successive :meth:`lap` calls by name."""

    def __init__(self) -> None:
        self.phases_s: Dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases_s[name] = self.phases_s.get(name, 0.0) + now - self._last
        self._last = now
