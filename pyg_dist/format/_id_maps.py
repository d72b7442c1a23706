"""Original ids of the relabelled nodes and edges, as each format version keeps them.

Version 2 keeps, in every ``part_<p>/``, ``node_ids.pt`` (per node type, the original
ids of the nodes the partition owns, in new-id order) and ``edge_ids.pt`` (per edge
type, the original ids of its edges): no file holds a map over the whole graph, so
none needs O(total nodes) memory to write or read. Version 1 kept one ``node_map.pt``
and one ``edge_map.pt`` at the root; :func:`read_part_ids` reads a partition's slice
of them (mapped, so only that slice is paged in).

Files hold a tensor (homogeneous graphs) or a dict by node type / ``"src__rel__dst"``
edge key, and are checked before use: int32 (written when every id fits: 4 bytes per
owned node or edge) or int64, one id per owned node or edge, every id in range.
:func:`read_part_ids` gives int64 unless asked for the ids as stored (the stores map
them so: no private copy).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.format import _partition_io as io
from pyg_dist.format._part_manifest import check_files
from pyg_dist.format._meta import PartitionFormatError, PartitionMeta
from pyg_dist._typing import EdgeType, NodeType, edge_key

Group = Union[NodeType, EdgeType]


def _layout(meta: PartitionMeta, kind: str) -> Tuple[tuple, dict, dict]:
    if kind == "node":
        return meta.node_types, meta.node_offsets, meta.num_nodes
    if kind == "edge":
        return meta.edge_types, meta.edge_offsets, meta.num_edges
    raise ValueError(f"kind must be 'node' or 'edge', got {kind!r}")


def _by_type(value: object, meta: PartitionMeta, kind: str, path: Path) -> Dict[Group, Tensor]:
    types = _layout(meta, kind)[0]
    if not meta.is_hetero:
        if not isinstance(value, Tensor):
            raise PartitionFormatError(f"{path}: expected a tensor of {kind} ids, got "
                                       f"{type(value).__name__}")
        return {types[0]: value}
    names = {(t if kind == "node" else edge_key(t)): t for t in types}
    if not isinstance(value, dict) or set(value) != set(names):
        raise PartitionFormatError(f"{path}: expected a dict of {kind} ids keyed by "
                                   f"{sorted(names)}")
    return {names[k]: v for k, v in value.items()}


def _check(ids: object, count: int, total: int, what: str, path: Path) -> Tensor:
    if not isinstance(ids, Tensor) or ids.dtype not in (torch.int64, torch.int32) or \
            ids.dim() != 1:
        raise PartitionFormatError(f"{path}: {what} must be a 1-D int64 or int32 tensor")
    if ids.numel() != count:
        raise PartitionFormatError(f"{path}: {what} has {ids.numel()} ids, expected {count}")
    if count and (int(ids.min()) < 0 or int(ids.max()) >= total):
        raise PartitionFormatError(f"{path}: {what} holds ids outside [0, {total})")
    return ids


def read_part_ids(root: io.PathLike, meta: PartitionMeta, part: int,
                  kind: str = "node", verify: bool = False,
                  as_stored: bool = False) -> Dict[Group, Tensor]:
    """Original ids of the nodes partition ``part`` owns (``kind="node"``) or of its
    edges (``"edge"``), per type, in new-id order: new global id ``offsets[part] + i``
    was original id ``ids[i]``.

    The file is mapped; its size is checked against the partition's ``MANIFEST.json``
    (constant time), its digest only with ``verify=True``. The ids come as int64 (a
    copy where the file stores int32), or with ``as_stored=True`` as the file holds them
    (int32 or int64, mapped).

    Raises:
        PartitionFormatError: naming the file, if it is missing or not as described
            (:class:`~pyg_dist.format._part_manifest.PartitionDigestError` when its bytes
            differ from the digest recorded at write time).
    """
    types, offsets, totals = _layout(meta, kind)
    if not 0 <= part < meta.num_parts:
        raise ValueError(f"partition id {part} is out of range: {root} has "
                         f"{meta.num_parts} partition(s)")
    out: Dict[Group, Tensor] = {}
    if meta.version >= 2:
        path = io.part_dir(root, part) / (io.NODE_IDS_FILE if kind == "node" else io.EDGE_IDS_FILE)
        if path.is_file():  # a missing file is named by load_pt
            check_files(path.parent, meta, part, (path.name,), (path.name,) if verify else ())
        got = _by_type(io.load_pt(path, f"{kind} id file", mmap=True), meta, kind, path)
    else:
        path = Path(root) / (io.NODE_MAP_FILE if kind == "node" else io.EDGE_MAP_FILE)
        whole = _by_type(io.load_pt(path, f"{kind} map", mmap=True), meta, kind, path)
        got = {}
        for t in types:
            full = _check(whole[t], totals[t], totals[t], f"the map of {t}", path)
            got[t] = full[offsets[t][part]:offsets[t][part + 1]]
    for t in types:
        lo, hi = offsets[t][part], offsets[t][part + 1]
        ids = _check(got[t], hi - lo, totals[t], f"the ids of {t}", path)
        out[t] = ids if as_stored else ids.long()
    return out


def read_id_map(root: io.PathLike, kind: str = "node") -> Union[Tensor, Dict[str, Tensor]]:
    """The whole new -> original id map (``kind="node"`` or ``"edge"``), as version 1's
    ``node_map.pt``/``edge_map.pt`` held it: a tensor for homogeneous graphs, else a dict
    by node type or ``"src__rel__dst"`` edge key. Holds O(total nodes): for small
    graphs, tests and tools; large jobs use :func:`read_part_ids` per partition."""
    meta = io.read_meta(root)
    types = _layout(meta, kind)[0]
    parts = [read_part_ids(root, meta, p, kind) for p in range(meta.num_parts)]
    whole = {t: torch.cat([p[t] for p in parts]) for t in types}
    if not meta.is_hetero:
        return whole[types[0]]
    return {(t if kind == "node" else edge_key(t)): v for t, v in whole.items()}
