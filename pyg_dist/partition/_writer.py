"""The pipeline's one writer: a partition's halo, statistics and files, and META.

Every mode hands over a partition's CSC, data rows and id maps as
:class:`PartPieces` (tensors in memory, memory maps out of core, what a rank received
on several machines) and gets the same files, byte for byte, for the same pieces.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from pyg_dist.format import _partition_io as io
from pyg_dist.format._digest import ALGORITHM
from pyg_dist.format._meta import PartitionMeta, PartStats
from pyg_dist.partition._common import GraphSchema, Offsets, plain
from pyg_dist.partition._graph_kernels import outside_nodes, sorted_unique
from pyg_dist._typing import EdgeType, NodeType, edge_key

Array = Union[np.ndarray, torch.Tensor]


def _tensor(array: Array) -> torch.Tensor:
    return array if isinstance(array, torch.Tensor) else torch.from_numpy(plain(array))


def _numpy(array: Array) -> np.ndarray:
    return array.numpy() if isinstance(array, torch.Tensor) else plain(array)


def owned_range(offsets: Sequence[int], part: int) -> Tuple[int, int]:
    """The new ids ``[lo, hi)`` partition ``part`` owns."""
    return int(offsets[part]), int(offsets[part + 1])


@dataclass
class PartPieces:
    """What one partition is made of, all in new ids (tensors, arrays or memory maps).

    Args:
        csc: per edge type, ``(indptr, indices)`` of the partition's in-edges.
        node_rows: per node type, per data name, the rows of the nodes it owns.
        edge_rows: per edge type, per data name, the rows of its edges.
        node_ids: per node type, original ids of the nodes it owns.
        edge_ids: per edge type, original ids of its edges.
    """
    csc: Dict[EdgeType, Tuple[Array, Array]]
    node_rows: Dict[NodeType, Dict[str, Array]]
    edge_rows: Dict[EdgeType, Dict[str, Array]]
    node_ids: Dict[NodeType, np.ndarray]
    edge_ids: Dict[EdgeType, np.ndarray]


def outside_sorted(indices: np.ndarray, lo: int, hi: int, num_nodes: int,
                   block: Optional[int] = None) -> Tuple[np.ndarray, int]:
    """Sorted distinct entries of ``indices`` outside ``[lo, hi)`` and how many entries
    are: with a mark per node, or (``block`` given) by merging the distinct entries of
    blocks, holding no array of ``num_nodes``."""
    if block is None:
        return outside_nodes(plain(indices), lo, hi, num_nodes)
    count = 0

    def pieces() -> Iterator[np.ndarray]:
        nonlocal count
        for start in range(0, indices.shape[0], block):
            piece = np.asarray(indices[start:start + block])
            out = piece[(piece < lo) | (piece >= hi)]
            count += out.shape[0]
            yield out

    found = distinct(pieces())
    return found, count


def distinct(pieces: Iterable[np.ndarray]) -> np.ndarray:
    """Sorted distinct values (int64) of all ``pieces``, merged whenever what waits
    doubles what is merged (``n log n`` in all; memory: the distinct values, twice)."""
    found, pending, waiting = np.empty(0, dtype=np.int64), [], 0
    for piece in pieces:
        pending.append(sorted_unique(piece))
        waiting += pending[-1].shape[0]
        if waiting > max(found.shape[0], 1 << 20):
            found, pending, waiting = sorted_unique(np.concatenate([found, *pending])), [], 0
    return sorted_unique(np.concatenate([found, *pending])).astype(np.int64)


@dataclass
class PartHalo:
    """Halo node ids (sorted new ids per source node type) and edge counts."""
    halo: Dict[NodeType, np.ndarray]
    edges: Dict[EdgeType, int]
    cut: Dict[EdgeType, int]


def part_halo(source: GraphSchema, part: int, pieces: PartPieces, node_offsets: Offsets,
              block: Optional[int] = None) -> PartHalo:
    """The halo of one partition: the sources of its in-edges owned elsewhere."""
    found: Dict[NodeType, list] = {}
    edges, cut = {}, {}
    for et, (_, indices) in pieces.csc.items():
        lo, hi = owned_range(node_offsets[et[0]], part)
        outside, n_cut = outside_sorted(_numpy(indices), lo, hi, source.num_nodes[et[0]], block)
        edges[et], cut[et] = int(indices.shape[0]), int(n_cut)
        found.setdefault(et[0], []).append(outside)
    halo = {t: sorted_unique(np.concatenate(v)).astype(np.int64) for t, v in found.items()}
    return PartHalo(halo, edges, cut)


def write_part(tmp: Path, part: int, source: GraphSchema, pieces: PartPieces,
                      node_offsets: Offsets, halo: PartHalo,
                      halo_rows: Dict[NodeType, Dict[str, np.ndarray]], uid: str) -> PartStats:
    """Writes ``tmp/part_<part>/`` (format v2) and returns its statistics.

    Args:
        halo_rows: per node type, the rows of its halo nodes of each attribute stored
            for halos.
    """
    csc = {edge_key(et): {"indptr": _tensor(ip), "indices": _tensor(ix)}
           for et, (ip, ix) in pieces.csc.items()}
    edge_feats = {edge_key(et): {k: _tensor(v) for k, v in rows.items()}
                  for et, rows in pieces.edge_rows.items()}
    node_feats = {t: {k: _tensor(v) for k, v in rows.items()}
                  for t, rows in pieces.node_rows.items()}
    splits = {}
    for t in source.num_nodes:
        lo, _ = owned_range(node_offsets[t], part)
        splits[t] = {n[:-len("_mask")]: torch.from_numpy(
            np.flatnonzero(_numpy(pieces.node_rows[t][n])).astype(np.int64) + lo)
            for n in source.mask_names(t)}
    halo_t = {t: torch.from_numpy(ids) for t, ids in halo.halo.items()}
    halo_attrs = {t: {k: _tensor(np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v)
                      for k, v in halo_rows.get(t, {}).items()} for t in halo.halo}
    io.write_part(tmp, part, {"csc": csc, "halo": halo_t, "halo_attrs": halo_attrs, "uid": uid},
                  node_feats, edge_feats, splits,
                  {t: _tensor(v) for t, v in pieces.node_ids.items()},
                  {edge_key(t): _tensor(v) for t, v in pieces.edge_ids.items()},
                  source.is_hetero)
    return PartStats(
        owned_nodes={t: o[part + 1] - o[part] for t, o in node_offsets.items()},
        halo_nodes={t: int(halo.halo[t].shape[0]) if t in halo.halo else 0
                    for t in source.num_nodes},
        edges=halo.edges, cut_edges=halo.cut,
        train_nodes=sum(int(s["train"].numel()) for s in splits.values() if "train" in s))


def graph_meta(source: GraphSchema, num_parts: int, node_offsets: Offsets,
               edge_offsets: Dict[EdgeType, Tuple[int, ...]], method: str,
               seed: int) -> PartitionMeta:
    """The META of a partitioning, without per-partition statistics and uid."""
    splits = sorted({n[:-len("_mask")] for t in source.num_nodes for n in source.mask_names(t)})
    return PartitionMeta(
        num_parts=num_parts, is_hetero=source.is_hetero,
        node_types=tuple(source.num_nodes), edge_types=tuple(source.edge_types),
        num_nodes=dict(source.num_nodes),
        num_edges={et: source.num_edges(et) for et in source.edge_types},
        node_offsets=dict(node_offsets), edge_offsets=dict(edge_offsets),
        node_attrs={t: dict(s) for t, s in source.node_specs.items()},
        edge_attrs={et: dict(s) for et, s in source.edge_specs.items()},
        splits=tuple(splits), method=method, seed=seed, digests=ALGORITHM)


def halo_attr_names(source: GraphSchema, node_type: NodeType,
                    halo_attrs: Sequence[str]) -> Tuple[str, ...]:
    """The node attributes of ``node_type`` stored for its halo nodes too."""
    return tuple(k for k in source.node_specs[node_type] if k in halo_attrs)
