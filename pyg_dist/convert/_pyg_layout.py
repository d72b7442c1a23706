"""What a ``torch_geometric.distributed`` partition folder (PyG 2.5-2.8) declares.

PyG's ``Partitioner`` writes::

    root/META.json            {"num_parts", "is_hetero", "node_types", "edge_types",
                               "node_offset", "is_sorted"}
    root/node_map.pt          partition of every node   (hetero: node_map/<type>.pt)
    root/edge_map.pt          partition of every edge   (hetero: edge_map/<src__rel__dst>.pt)
    root/part_<p>/graph.pt, node_feats.pt, edge_feats.pt

:class:`PygLayout` reads and checks ``META.json`` and the two maps; the per-partition
files are read by :mod:`pyg_dist.convert._pyg_graph`. Every problem raises
:class:`~pyg_dist.convert._pickles.PygFormatError` naming the file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import torch
from torch import Tensor

from pyg_dist.convert._pickles import PickleLoader, PygFormatError
from pyg_dist.format._jsonio import read_json
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, edge_key

META_FILE = "META.json"
PART_FILES = ("graph.pt", "node_feats.pt", "edge_feats.pt")


def index_tensor(value: Any, path: Path, what: str) -> Tensor:
    """``value`` as a 1-d int64 tensor; raises naming ``path`` and ``what`` otherwise."""
    if not isinstance(value, Tensor) or value.dim() != 1 or value.is_floating_point() \
            or value.is_complex() or value.dtype == torch.bool:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise PygFormatError(f"{path}: {what} must be a 1-d integer tensor, got {shape}")
    return value.long()


def check_range(ids: Tensor, hi: int, path: Path, what: str) -> None:
    """Raises unless every id is in ``[0, hi)``."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= hi):
        bad = ids[(ids < 0) | (ids >= hi)][0]
        raise PygFormatError(f"{path}: {what} holds ids outside [0, {hi}) (e.g. {int(bad)})")


def _meta_field(meta: dict, key: str, kind: type, path: Path) -> Any:
    value = meta.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        what = "an integer" if kind is int else "true or false"
        raise PygFormatError(f"{path}: '{key}' must be {what}, got {value!r}")
    return value


@dataclass
class PygLayout:
    """``META.json`` and the id maps of a PyG partition folder, checked.

    Args:
        root (Path): the folder.
        num_parts (int): number of partitions.
        is_hetero (bool): whether the graph was a ``HeteroData``.
        node_types (List[str]): node types in PyG's order (``["_N"]`` if homogeneous).
        edge_types (List[EdgeType]): edge types in PyG's order.
        node_maps (Dict[str, Tensor]): per node type, the partition of every node.
        edge_maps (Dict[EdgeType, Tensor]): per edge type, the partition of every edge.
    """
    root: Path
    num_parts: int
    is_hetero: bool
    node_types: List[NodeType]
    edge_types: List[EdgeType]
    node_maps: Dict[NodeType, Tensor]
    edge_maps: Dict[EdgeType, Tensor]

    def num_nodes(self, node_type: NodeType) -> int:
        return int(self.node_maps[node_type].numel())

    def num_edges(self, edge_type: EdgeType) -> int:
        return int(self.edge_maps[edge_type].numel())

    def node_offset(self, node_type: NodeType) -> int:
        """Where ``node_type`` starts in PyG's homogeneous ids (its ``global_id``)."""
        return sum(self.num_nodes(t) for t in self.node_types[:self.node_types.index(node_type)])

    def edge_offset(self, edge_type: EdgeType) -> int:
        """Where ``edge_type`` starts in PyG's homogeneous edge ids (``graph.pt``'s
        ``edge_id``)."""
        return sum(self.num_edges(t) for t in self.edge_types[:self.edge_types.index(edge_type)])

    def part_dir(self, part: int) -> Path:
        return self.root / f"part_{part}"

    def node_map_path(self, node_type: NodeType) -> Path:
        return self.root / "node_map" / f"{node_type}.pt" if self.is_hetero \
            else self.root / "node_map.pt"

    def edge_map_path(self, edge_type: EdgeType) -> Path:
        return self.root / "edge_map" / f"{edge_key(edge_type)}.pt" if self.is_hetero \
            else self.root / "edge_map.pt"

    @classmethod
    def read(cls, root: Path, loader: PickleLoader) -> "PygLayout":
        """Reads ``root/META.json`` and the maps; checks the partition folders exist."""
        root = Path(root)
        if not root.is_dir():
            raise PygFormatError(f"input folder {root} does not exist")
        meta = _read_meta(root / META_FILE)
        num_parts = _meta_field(meta, "num_parts", int, root / META_FILE)
        if num_parts < 1:
            raise PygFormatError(f"{root / META_FILE}: 'num_parts' must be >= 1, got {num_parts}")
        is_hetero = _meta_field(meta, "is_hetero", bool, root / META_FILE)
        node_types, edge_types = _types(meta, is_hetero, root / META_FILE)
        if is_hetero and "node_offset" not in meta:
            raise PygFormatError(f"{root / META_FILE} has no 'node_offset': written by "
                                 f"torch_geometric < 2.5, whose heterogeneous layout is not "
                                 f"supported (repartition with pyg-dist-partition)")
        layout = cls(root, num_parts, is_hetero, node_types, edge_types, {}, {})
        for t in node_types:
            layout.node_maps[t] = layout._read_map(loader, layout.node_map_path(t), "node map")
        for et in edge_types:
            layout.edge_maps[et] = layout._read_map(loader, layout.edge_map_path(et), "edge map")
        layout._check_offsets(meta.get("node_offset"))
        for p in range(num_parts):
            if not layout.part_dir(p).is_dir():
                raise PygFormatError(f"partition folder {layout.part_dir(p)} is missing "
                                     f"({root / META_FILE} says num_parts={num_parts})")
        return layout

    def _read_map(self, loader: PickleLoader, path: Path, what: str) -> Tensor:
        ids = index_tensor(loader.load(path, what), path, what)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_parts):
            raise PygFormatError(f"{path}: {what} holds partition ids outside "
                                 f"[0, {self.num_parts})")
        return ids

    def _check_offsets(self, offsets: Any) -> None:
        """PyG's ``node_offset`` (hetero) must match the node counts of the maps."""
        if not self.is_hetero or offsets is None:
            return
        expected = [self.node_offset(t) for t in self.node_types]
        if offsets != expected:
            raise PygFormatError(f"{self.root / META_FILE}: node_offset {offsets} disagrees "
                                 f"with the node counts of {self.root / 'node_map'} "
                                 f"(offsets {expected})")


def _read_meta(path: Path) -> dict:
    if not path.is_file():
        raise PygFormatError(f"{path} is missing: not a torch_geometric.distributed "
                             f"partition folder")
    meta = read_json(path, PygFormatError)
    if not isinstance(meta, dict):
        raise PygFormatError(f"{path} must hold a JSON object, got {type(meta).__name__}")
    return meta


def _types(meta: dict, is_hetero: bool, path: Path) -> tuple:
    """Node and edge types in PyG's order (homogeneous: one of each)."""
    if not is_hetero:
        return [HOMO_NODE], [HOMO_EDGE]
    node_types = meta.get("node_types")
    if not isinstance(node_types, list) or not node_types \
            or not all(isinstance(t, str) and t for t in node_types) \
            or len(set(node_types)) != len(node_types):
        raise PygFormatError(f"{path}: 'node_types' must be a list of distinct names for a "
                             f"heterogeneous graph, got {node_types!r}")
    edge_types = meta.get("edge_types")
    ok = isinstance(edge_types, list) and all(
        isinstance(et, list) and len(et) == 3 and all(isinstance(x, str) for x in et)
        and et[0] in node_types and et[2] in node_types for et in edge_types)
    if not ok or len({tuple(et) for et in edge_types}) != len(edge_types):
        raise PygFormatError(f"{path}: 'edge_types' must be a list of distinct "
                             f"[src, rel, dst] triples of known node types, got {edge_types!r}")
    return list(node_types), [tuple(et) for et in edge_types]
