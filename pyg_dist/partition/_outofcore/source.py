"""A chunked graph seen the way the partitioner sees a ``Data``/``HeteroData``.

:class:`ChunkedSource` gives the same typed view as
:class:`~pyg_dist.format._tables.GraphTables` (node and edge types, counts,
attribute specs, ``<split>_mask`` attributes) without reading any data: edges come
one chunk at a time and data rows in bounded blocks from
:class:`~pyg_dist.chunked.ChunkedGraph`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Tuple, Union

import numpy as np

from pyg_dist.chunked import ChunkedGraph
from pyg_dist.chunked._limits import check_memory
from pyg_dist.format._meta import AttrSpec
from pyg_dist.partition._outofcore.budget import (OUT_OF_CORE_BYTES_PER_NODE, MemoryBudget,
                                                 parse_size)
from pyg_dist.format._schema import DTYPES, dtype_name
from pyg_dist._typing import EdgeType, NodeType

_RESERVED = ("edge_index", "num_nodes")


@dataclass
class ChunkedSource:
    """Types, counts and attribute specs of a chunked graph, read from its headers.

    Args:
        graph (ChunkedGraph): the opened folder.
        is_hetero (bool): whether it is written as a ``HeteroData`` (anything but DGL's
            homogeneous ``_N`` / ``_N:_E:_N``).
        num_nodes: nodes per type, in ``metadata.json``'s order.
        edge_names: per edge type triple, its ``"src:rel:dst"`` name in the folder.
        node_specs: per node type, dtype and row shape of each node data array.
        edge_specs: per edge type, dtype and row shape of each edge data array.
    """
    graph: ChunkedGraph
    is_hetero: bool
    num_nodes: Dict[NodeType, int]
    edge_names: Dict[EdgeType, str]
    node_specs: Dict[NodeType, Dict[str, AttrSpec]]
    edge_specs: Dict[EdgeType, Dict[str, AttrSpec]]

    @classmethod
    def open(cls, graph: ChunkedGraph) -> "ChunkedSource":
        """Reads the specs of every data array (one empty row range each).

        Raises:
            ValueError: a reserved data name, a dtype partitions cannot store, or (for a
                homogeneous graph) a name used by both node and edge data.
        """
        edge_names = {graph.meta.edge_types[n].edge_type: n for n in graph.edge_types}
        node_specs = {t: {name: _spec(graph.read_rows(t, name, 0, 0), f"node data {t}/{name}")
                          for name in graph.node_data_names(t)} for t in graph.node_types}
        edge_specs = {et: {name: _spec(graph.read_edge_rows(n, name, 0, 0),
                                       f"edge data {n}/{name}")
                           for name in graph.edge_data_names(n)}
                      for et, n in edge_names.items()}
        source = cls(graph, graph.is_hetero, {t: graph.num_nodes(t) for t in graph.node_types},
                     edge_names, node_specs, edge_specs)
        source._check_names()
        return source

    def _check_names(self) -> None:
        where = self.graph.meta.source
        for specs in [*self.node_specs.values(), *self.edge_specs.values()]:
            for name in specs:
                if name in _RESERVED:
                    raise ValueError(f"{where}: data may not be named {name!r}")
        if not self.is_hetero and self.edge_specs:
            both = sorted(set(next(iter(self.node_specs.values())))
                          & set(next(iter(self.edge_specs.values()))))
            if both:
                raise ValueError(f"{where}: {both[0]!r} is both node and edge data of a "
                                 f"homogeneous graph; a Data object holds one attribute per "
                                 f"name (rename one)")
        if not self.edge_names:
            raise ValueError(f"{where}: the graph has no edge type to partition")

    @property
    def edge_types(self) -> Tuple[EdgeType, ...]:
        return tuple(self.edge_names)

    @property
    def total_nodes(self) -> int:
        return sum(self.num_nodes.values())

    def num_edges(self, edge_type: EdgeType) -> int:
        return self.graph.num_edges(self.edge_names[edge_type])

    def mask_names(self, node_type: NodeType) -> Tuple[str, ...]:
        """Node data that are ``<split>_mask`` arrays (bool, one value per node)."""
        return tuple(n for n, s in self.node_specs[node_type].items()
                     if n.endswith("_mask") and s.dtype == "bool" and s.shape == ())

    def edge_chunks(self, edge_type: EdgeType) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """``(src, dst)`` int64 arrays of one edge type, one chunk at a time."""
        for src, dst in self.graph.iter_edge_chunks(self.edge_names[edge_type]):
            yield src.numpy(), dst.numpy()

    def node_rows(self, node_type: NodeType, name: str, start: int, stop: int) -> np.ndarray:
        return self.graph.read_rows(node_type, name, start, stop).numpy()

    def edge_rows(self, edge_type: EdgeType, name: str, start: int, stop: int) -> np.ndarray:
        return self.graph.read_edge_rows(self.edge_names[edge_type], name, start, stop).numpy()

    def train_mask(self, node_type: NodeType, block: int) -> np.ndarray:
        """The ``train_mask`` of a node type (all ``False`` without one), read in blocks."""
        n = self.num_nodes[node_type]
        out = np.zeros(n, dtype=bool)
        if "train" + "_mask" in self.mask_names(node_type):
            for lo in range(0, n, block):
                out[lo:lo + block] = self.node_rows(node_type, "train_mask", lo,
                                                    min(lo + block, n))
        return out


def _spec(empty, what: str) -> AttrSpec:
    name = dtype_name(empty.dtype)
    if name not in DTYPES:
        raise ValueError(f"{what} holds {name} values; partitions store {', '.join(DTYPES)}")
    return AttrSpec(name, tuple(empty.shape[1:]))


def check_node_memory(graph: ChunkedGraph, bytes_per_node: int, ranks: int = 1) -> None:
    """Raises :class:`~pyg_dist.chunked.ChunkedTooLargeError` when the node-sized arrays
    a streaming partitioner holds beyond its budget (``bytes_per_node`` for each node of
    this rank's share of ``ranks``) exceed the memory available on this machine."""
    total = sum(graph.num_nodes(t) for t in graph.node_types)
    share = -(-total // max(ranks, 1))
    what = f"{graph.meta.source}: {total} nodes" + (
        f" ({share} per rank on {ranks} ranks)" if ranks > 1 else "")
    check_memory(share * bytes_per_node, f"{what} at {bytes_per_node} bytes each beyond the "
                 f"memory budget", hint="check the node counts in metadata.json, or "
                 "partition on more machines under torchrun")


def open_source(input: Union[ChunkedGraph, str, Path], num_parts: object, memory_budget: object,
                allow_external_paths: bool = False,
                bytes_per_node: int = OUT_OF_CORE_BYTES_PER_NODE, ranks: int = 1
                ) -> Tuple[ChunkedSource, MemoryBudget]:
    """Opens a chunked graph and checks the options every streaming partitioner takes:
    ``num_parts`` in ``[1, nodes]``, a positive ``memory_budget`` (bytes or ``"4GB"``)
    that holds the largest edge chunk while it is read. Before anything is sized by the
    counts, the node-sized arrays they imply must fit this machine
    (:func:`check_node_memory`).

    Args:
        input (ChunkedGraph, str or Path): an opened graph or its folder.
        num_parts (int): the number of partitions.
        memory_budget (int or str): bytes (or ``"4GB"``) of the streaming steps.
        allow_external_paths (bool): with a folder, read chunk files outside it too (see
            :meth:`ChunkedGraph.open`).
        bytes_per_node (int): what the partitioner holds per node beyond the budget.
        ranks (int): the ranks sharing the nodes (multi-machine partitioning).

    Raises:
        ValueError: naming the option (:class:`~.budget.MemoryBudgetError` with the size
            needed for a budget too small); :class:`~pyg_dist.chunked.ChunkedFormatError`
            for a bad folder or counts implying more memory than the machine has.
    """
    graph = input if isinstance(input, ChunkedGraph) else \
        ChunkedGraph.open(input, allow_external_paths)
    check_node_memory(graph, bytes_per_node, ranks)
    source = ChunkedSource.open(graph)
    if isinstance(num_parts, bool) or not isinstance(num_parts, int) or \
            not 1 <= num_parts <= source.total_nodes:
        raise ValueError(f"num_parts must be an integer in [1, {source.total_nodes}] "
                         f"(the number of nodes), got {num_parts!r}")
    total = parse_size(memory_budget) if isinstance(memory_budget, str) else memory_budget
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise ValueError(f"memory_budget must be a positive number of bytes or a size "
                         f"such as '4GB', got {memory_budget!r}")
    budget = MemoryBudget(total)
    for name in source.edge_names.values():  # fail before any work: chunks are read whole
        spec = graph.meta.edge_types[name]
        if spec.chunk_counts is None and spec.files.format.name == "csv":
            continue  # counted only by reading; checked as each chunk is read
        rows = max(graph.edge_chunk_rows(name, i) for i in range(graph.num_edge_chunks(name)))
        budget.check_streamed_edges(rows, f"the largest edge chunk of {name}")
    return source, budget

