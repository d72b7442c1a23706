"""Rebuilding the original graph from the partitions of a PyG partition folder.

Each ``part_<p>`` of a ``torch_geometric.distributed`` folder holds (PyG 2.5-2.8):

- ``graph.pt``: ``{"row", "col", "edge_id", "size"}`` (hetero: one such dict per
  edge-type tuple) -- the edges whose destination ``p`` owns, with source/destination
  in original (per-type) ids and ``edge_id`` in PyG's homogeneous edge ids (per-type
  id plus the type's offset);
- ``node_feats.pt``: ``{"global_id", "feats": {"x": ...}, "time"?}`` (hetero: by node
  type, ``global_id`` homogeneous, ``id`` per type) -- the nodes ``p`` owns and their
  rows; ``time`` is the whole graph's node time;
- ``edge_feats.pt``: ``{"global_id", "feats": {"edge_attr": ...}, "edge_time"?}``
  (hetero: by edge type, ``global_id`` per type), rows in ``graph.pt``'s order.

:class:`PygGraphReader` reads them all, checks every id, that every node and edge is
listed exactly once and where the id maps put it, and that every attribute row is
filled, then builds the ``Data``/``HeteroData`` in PyG's original ids. It holds the
whole graph in one process, as PyG's own partitioner did.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Set, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.convert._pickles import PickleLoader, PygFormatError
from pyg_dist.convert._pyg_layout import PygLayout, check_range, index_tensor
from pyg_dist._progress import track
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, edge_key


@dataclass
class _Columns:
    """Named attribute tensors of ``size`` rows, filled one partition at a time."""
    size: int
    values: Dict[str, Tensor] = field(default_factory=dict)
    filled: Dict[str, int] = field(default_factory=dict)
    parts: Dict[str, Set[int]] = field(default_factory=dict)

    def put(self, name: str, rows: Tensor, value: Any, part: int, path: Path) -> None:
        """Writes ``value`` (one row per entry of ``rows``) at ``rows``."""
        if value is None:
            return
        if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != rows.numel():
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise PygFormatError(f"{path}: attribute '{name}' has shape {got}, expected "
                                 f"{rows.numel()} rows (one per listed id)")
        if name not in self.values:
            self.values[name] = value.new_empty((self.size, *value.shape[1:]))
            self.filled[name], self.parts[name] = 0, set()
        elif value.dtype != self.values[name].dtype or value.shape[1:] != \
                self.values[name].shape[1:]:
            raise PygFormatError(f"{path}: attribute '{name}' is {value.dtype} "
                                 f"{tuple(value.shape[1:])} per row, other partitions have "
                                 f"{self.values[name].dtype} {tuple(self.values[name].shape[1:])}")
        self.values[name][rows] = value
        self.filled[name] += rows.numel()
        self.parts[name].add(part)

    def put_whole(self, name: str, value: Any, path: Path) -> None:
        """Sets an attribute PyG stores whole in every partition (node ``time``)."""
        if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != self.size:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise PygFormatError(f"{path}: '{name}' has shape {got}, expected {self.size} "
                                 f"rows (PyG stores it for every node)")
        if name in self.values and not torch.equal(self.values[name], value):
            raise PygFormatError(f"{path}: '{name}' differs from other partitions' copy")
        self.values[name] = value
        self.filled[name], self.parts[name] = self.size, set()

    def incomplete(self) -> Dict[str, Set[int]]:
        """Attributes some partitions lack: name -> partitions that had them."""
        return {k: self.parts[k] for k, n in self.filled.items() if n != self.size}


def _owner_table(size: int) -> Tensor:
    return torch.full((size,), -1, dtype=torch.long)


class PygGraphReader:
    """Reads every partition of ``layout`` and rebuilds the original graph.

    Args:
        layout (PygLayout): the folder's checked ``META.json`` and maps.
        loader (PickleLoader): how ``.pt`` files are loaded.
    """

    def __init__(self, layout: PygLayout, loader: PickleLoader) -> None:
        self.layout, self.loader = layout, loader
        self.node_owner = {t: _owner_table(layout.num_nodes(t)) for t in layout.node_types}
        self.edge_owner = {t: _owner_table(layout.num_edges(t)) for t in layout.edge_types}
        self.edge_index = {t: torch.empty((2, layout.num_edges(t)), dtype=torch.long)
                           for t in layout.edge_types}
        self.node_cols = {t: _Columns(layout.num_nodes(t)) for t in layout.node_types}
        self.edge_cols = {t: _Columns(layout.num_edges(t)) for t in layout.edge_types}

    def read(self, progress: bool = True) -> Union[Data, HeteroData]:
        """Reads all partitions; returns the graph in PyG's original ids."""
        for part in track(range(self.layout.num_parts), "reading PyG partitions",
                          enabled=progress):
            folder = self.layout.part_dir(part)
            eids = self._read_edges(part, folder / "graph.pt")
            self._read_nodes(part, folder / "node_feats.pt")
            self._read_edge_feats(part, folder / "edge_feats.pt", eids)
        self._check_complete()
        return self._build()

    # ---- one partition -------------------------------------------------------------
    def _by_type(self, obj: Any, path: Path, types: list, what: str) -> Dict:
        """The per-type entries of a loaded file (homogeneous: the one entry)."""
        if not isinstance(obj, Mapping):
            raise PygFormatError(f"{path}: {what} must be a dict, got {type(obj).__name__}")
        if not self.layout.is_hetero:
            return {types[0]: obj} if obj else {}
        entries = {}
        for key, entry in obj.items():
            key = tuple(key) if isinstance(key, (tuple, list)) else key
            if key not in types or not isinstance(entry, Mapping):
                raise PygFormatError(f"{path}: unexpected {what} entry {key!r} (known types: "
                                     f"{types})")
            entries[key] = entry
        return entries

    def _entry(self, entry: Mapping, key: str, path: Path, what: str) -> Tensor:
        if key not in entry:
            raise PygFormatError(f"{path}: {what} has no '{key}'")
        return index_tensor(entry[key], path, f"{what} '{key}'")

    def _claim(self, owner: Tensor, ids: Tensor, part: int, path: Path, what: str) -> None:
        """Marks ``ids`` as listed by ``part``; each id may be listed once in the folder."""
        taken = ids[owner[ids] != -1]
        ordered = torch.sort(ids).values
        twice = torch.cat([taken, ordered[1:][ordered[1:] == ordered[:-1]]])
        if twice.numel():
            raise PygFormatError(f"{path}: {what} lists ids that are listed more than once "
                                 f"in the folder (e.g. {int(twice[0])})")
        owner[ids] = part

    def _check_map(self, partition_of: Tensor, ids: Tensor, part: int, path: Path,
                   map_path: Path, what: str) -> None:
        wrong = partition_of[ids] != part
        if bool(wrong.any()):
            i = int(ids[wrong][0])
            raise PygFormatError(f"{path} lists {what} {i} in partition {part}, but "
                                 f"{map_path} assigns it to partition {int(partition_of[i])}")

    def _read_edges(self, part: int, path: Path) -> Dict[EdgeType, Tensor]:
        """Reads ``graph.pt``; returns this partition's per-type edge ids in file order."""
        lay, eids = self.layout, {}
        for et, entry in self._by_type(self.loader.load(path, "graph file"), path,
                                       lay.edge_types, "graph").items():
            what = "graph" if not lay.is_hetero else f"edge type {edge_key(et)}"
            row, col = self._entry(entry, "row", path, what), self._entry(entry, "col", path, what)
            eid = self._entry(entry, "edge_id", path, what) - lay.edge_offset(et)
            if not row.numel() == col.numel() == eid.numel():
                raise PygFormatError(f"{path}: {what} 'row', 'col' and 'edge_id' differ in "
                                     f"length ({row.numel()}, {col.numel()}, {eid.numel()})")
            n_src, n_dst = lay.num_nodes(et[0]), lay.num_nodes(et[2])
            size = entry.get("size")
            if size is not None and _pair(size) != (n_src, n_dst):
                raise PygFormatError(f"{path}: {what} 'size' {size!r} disagrees with "
                                     f"the node counts of {lay.node_map_path(et[0]).name} and "
                                     f"{lay.node_map_path(et[2]).name} ({n_src}, {n_dst})")
            check_range(eid, lay.num_edges(et), path, f"{what} 'edge_id' (less its type's "
                        f"offset {lay.edge_offset(et)}, against {lay.edge_map_path(et).name})")
            check_range(row, n_src, path, f"{what} 'row'")
            check_range(col, n_dst, path, f"{what} 'col'")
            self._claim(self.edge_owner[et], eid, part, path, f"{what} 'edge_id'")
            self._check_map(lay.edge_maps[et], eid, part, path, lay.edge_map_path(et), "edge")
            self.edge_index[et][0, eid], self.edge_index[et][1, eid] = row, col
            eids[et] = eid
        return eids

    def _read_nodes(self, part: int, path: Path) -> None:
        lay = self.layout
        for t, entry in self._by_type(self.loader.load(path, "node feature file"), path,
                                      lay.node_types, "node features").items():
            what = "node features" if not lay.is_hetero else f"node type '{t}'"
            ids = self._entry(entry, "global_id", path, what)
            if lay.is_hetero:
                ids = ids - lay.node_offset(t)
                if "id" in entry and not torch.equal(self._entry(entry, "id", path, what), ids):
                    raise PygFormatError(f"{path}: {what} 'id' disagrees with 'global_id' "
                                         f"less the type's offset {lay.node_offset(t)}")
            check_range(ids, lay.num_nodes(t), path, f"{what} 'global_id'")
            self._claim(self.node_owner[t], ids, part, path, f"{what} 'global_id'")
            self._check_map(lay.node_maps[t], ids, part, path, lay.node_map_path(t), "node")
            for name, value in _feats(entry, path, what).items():
                self.node_cols[t].put(name, ids, value, part, path)
            if entry.get("time") is not None:
                self.node_cols[t].put_whole("time", entry["time"], path)

    def _read_edge_feats(self, part: int, path: Path, eids: Dict[EdgeType, Tensor]) -> None:
        lay = self.layout
        for et, entry in self._by_type(self.loader.load(path, "edge feature file"), path,
                                       lay.edge_types, "edge features").items():
            what = "edge features" if not lay.is_hetero else f"edge type {edge_key(et)}"
            rows = eids.get(et, torch.empty(0, dtype=torch.long))
            if "global_id" in entry:
                ids = self._entry(entry, "global_id", path, what)
                if not torch.equal(torch.sort(ids).values, torch.sort(rows).values):
                    raise PygFormatError(f"{path}: {what} 'global_id' lists other edges than "
                                         f"{path.parent / 'graph.pt'}")
                rows = ids
            for name, value in _feats(entry, path, what).items():
                self.edge_cols[et].put(name, rows, value, part, path)
            if entry.get("edge_time") is not None:
                self.edge_cols[et].put("edge_time", rows, entry["edge_time"], part, path)

    # ---- the whole graph -----------------------------------------------------------
    def _check_complete(self) -> None:
        """Every node and edge was listed, and every attribute has all its rows."""
        lay = self.layout
        for kind, owners, maps, file in (("node", self.node_owner, lay.node_maps, "node_feats.pt"),
                                         ("edge", self.edge_owner, lay.edge_maps, "graph.pt")):
            for t, owner in owners.items():
                missing = torch.nonzero(owner == -1).view(-1)
                if missing.numel():
                    i = int(missing[0])
                    raise PygFormatError(f"{lay.part_dir(int(maps[t][i])) / file} lacks {kind} "
                                         f"{i}{_of_type(t, lay.is_hetero)}, which the "
                                         f"{kind} map assigns to that partition")
        for cols, file in ((self.node_cols, "node_feats.pt"), (self.edge_cols, "edge_feats.pt")):
            for t, col in cols.items():
                for name, had in col.incomplete().items():
                    part = min(set(range(lay.num_parts)) - had)
                    raise PygFormatError(f"{lay.part_dir(part) / file} lacks attribute "
                                         f"'{name}'{_of_type(t, lay.is_hetero)} that other "
                                         f"partitions have")

    def _build(self) -> Union[Data, HeteroData]:
        lay = self.layout
        if not lay.is_hetero:
            data = Data(edge_index=self.edge_index[HOMO_EDGE], num_nodes=lay.num_nodes(HOMO_NODE))
            stores = {HOMO_NODE: data, HOMO_EDGE: data}
        else:
            data = HeteroData()
            stores = {t: data[t] for t in lay.node_types}
            for t in lay.node_types:
                data[t].num_nodes = lay.num_nodes(t)
            for et in lay.edge_types:
                data[et].edge_index = self.edge_index[et]
                stores[et] = data[et]
        for cols in (self.node_cols, self.edge_cols):
            for t, col in cols.items():
                for name, value in col.values.items():
                    if name in stores[t]:
                        raise PygFormatError(f"{lay.root}: attribute name '{name}' clashes "
                                             f"with another attribute of the graph")
                    stores[t][name] = value
        return data


def _pair(size: Any) -> Any:
    """``size`` as a pair of ints, or ``None`` if it is not one."""
    if isinstance(size, (tuple, list)) and len(size) == 2 and \
            all(isinstance(s, int) and not isinstance(s, bool) for s in size):
        return tuple(size)
    return None


def _feats(entry: Mapping, path: Path, what: str) -> Dict[str, Any]:
    feats = entry.get("feats")
    feats = {} if feats is None else feats
    if not isinstance(feats, Mapping) or not all(isinstance(k, str) for k in feats):
        raise PygFormatError(f"{path}: {what} 'feats' must be a dict by attribute name")
    return dict(feats)


def _of_type(group: Union[NodeType, EdgeType], is_hetero: bool) -> str:
    if not is_hetero:
        return ""
    return f" of type {edge_key(group)}" if isinstance(group, tuple) else f" of type '{group}'"
