"""A chunked graph folder assembled into one in-memory ``Data``/``HeteroData``.

For graphs that fit in memory (tests, small inputs to ``pyg-dist-partition --input``);
graphs that do not are read chunk by chunk with :class:`ChunkedGraph` instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.chunked._errors import ChunkedFormatError
from pyg_dist.chunked._limits import check_memory, in_memory_bytes
from pyg_dist.chunked._reader import ChunkedGraph, EdgeTypeLike

_RESERVED = ("edge_index", "num_nodes")


def _edge_index(graph: ChunkedGraph, edge_type: EdgeTypeLike) -> Tensor:
    """All edges of one type as ``[2, E]``, filled chunk by chunk (no second copy)."""
    index = torch.empty(2, graph.num_edges(edge_type), dtype=torch.long)
    start = 0
    for src, dst in graph.iter_edge_chunks(edge_type):
        index[0, start:start + src.numel()] = src
        index[1, start:start + src.numel()] = dst
        start += src.numel()
    return index


def _whole(chunks) -> Tensor:
    parts = list(chunks)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _node_attrs(graph: ChunkedGraph, node_type: str) -> Dict[str, Tensor]:
    return {name: _whole(graph.iter_node_data(node_type, name))
            for name in graph.node_data_names(node_type)}


def _edge_attrs(graph: ChunkedGraph, edge_type: str) -> Dict[str, Tensor]:
    return {name: _whole(graph.iter_edge_data(edge_type, name))
            for name in graph.edge_data_names(edge_type)}


def _check_homo_names(graph: ChunkedGraph, nodes: Dict[str, Tensor],
                      edges: Dict[str, Tensor]) -> None:
    source = graph.meta.source
    for name in [*nodes, *edges]:
        if name in _RESERVED:
            raise ChunkedFormatError(f"{source}: data may not be named {name!r}")
    both = sorted(set(nodes) & set(edges))
    if both:
        raise ChunkedFormatError(f"{source}: {both[0]!r} is both node and edge data of a "
                                 f"homogeneous graph; a Data object holds one attribute per "
                                 f"name (rename one)")


def check_fits_in_memory(graph: ChunkedGraph, limit: Optional[int] = None) -> None:
    """Raises :class:`~pyg_dist.chunked._errors.ChunkedTooLargeError` when assembling and
    partitioning ``graph`` in memory would need more than ``limit`` bytes (default: the
    memory available now), counted from ``metadata.json`` and the ``.npy`` headers."""
    nodes = sum(graph.num_nodes(t) for t in graph.node_types)
    edges = sum(graph.num_edges(t) for t in graph.edge_types)
    need = in_memory_bytes(nodes, edges, graph.data_bytes())
    check_memory(need, f"{graph.meta.source}: {nodes} nodes, {edges} edges and their data "
                       f"assembled in memory", limit,
                 "partition it out of core with --memory-budget SIZE")


def to_data(graph: ChunkedGraph) -> Union[Data, HeteroData]:
    """Assembles an opened :class:`ChunkedGraph` in memory (see :func:`read_chunked`);
    checks first that it fits (:func:`check_fits_in_memory`)."""
    check_fits_in_memory(graph)
    if not graph.is_hetero:
        nodes = _node_attrs(graph, graph.node_types[0])
        edges = _edge_attrs(graph, graph.edge_types[0]) if graph.edge_types else {}
        _check_homo_names(graph, nodes, edges)
        index = _edge_index(graph, None) if graph.edge_types else \
            torch.empty(2, 0, dtype=torch.long)
        data = Data(edge_index=index, **nodes, **edges)
        data.num_nodes = graph.num_nodes()
        return data
    data = HeteroData()
    for node_type in graph.node_types:
        data[node_type].num_nodes = graph.num_nodes(node_type)
        for name, value in _node_attrs(graph, node_type).items():
            if name in _RESERVED:
                raise ChunkedFormatError(f"{graph.meta.source}: data may not be named {name!r}")
            data[node_type][name] = value
    for name in graph.edge_types:
        store = data[graph.meta.edge_types[name].edge_type]
        store.edge_index = _edge_index(graph, name)
        for key, value in _edge_attrs(graph, name).items():
            if key in _RESERVED:
                raise ChunkedFormatError(f"{graph.meta.source}: data may not be named {key!r}")
            store[key] = value
    return data


def read_chunked(folder: Union[str, Path], allow_external_paths: bool = False
                 ) -> Union[Data, HeteroData]:
    """Reads a whole chunked graph folder into one ``Data``/``HeteroData`` in memory.

    Only for graphs that fit in memory (tests, small graphs, ``pyg-dist-partition
    --input`` until its out-of-core path exists): it holds every edge and every data
    row at once. Node type ``"_N"`` with edge type ``"_N:_E:_N"`` (DGL's homogeneous
    convention) becomes a ``Data``; anything else a ``HeteroData``. Data names are
    kept as they are (``feat`` stays ``feat``).

    Args:
        folder (str or Path): the folder holding ``metadata.json``.
        allow_external_paths (bool): also read chunk files outside ``folder`` (see
            :meth:`ChunkedGraph.open`).

    Raises:
        ChunkedFormatError: a malformed or inconsistent folder (one line naming the file);
            :class:`~pyg_dist.chunked._errors.ChunkedTooLargeError` when its counts imply
            more memory than is available.
        MissingDependencyError: parquet chunks without ``pyarrow``.
    """
    return to_data(ChunkedGraph.open(folder, allow_external_paths))
