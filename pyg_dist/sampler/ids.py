"""Original ids at the API boundary: the rule, and the tables one partition answers from.

**The rule.** Every node or edge id a user gives to or gets from pyg_dist's public API
is the dataset's original id (PyG's, GraphLearn's and ``torch_geometric.distributed``'s
rule): ``input_nodes``, ``edge_label_index``, ``labels`` (over all nodes in dataset
order), ``node_split``/``edge_split`` results, ``batch.n_id``/``e_id``,
``DistTensor``/``DistEmbedding`` indices of graph nodes. The partitioner's relabelled
range ids (partition ``p`` owns ``[node_offsets[p], node_offsets[p + 1])``) are
internal; batches carry them as ``part_n_id``/``part_e_id`` for those who want them.

**Relabelled -> original** (batches). The owner of a node or edge knows its original id:
``part_<p>/node_ids.pt``/``edge_ids.pt`` (format v2; v1's root maps are read by
:func:`~pyg_dist.format.id_maps.read_part_ids`), *mapped*, so every process of a
machine shares one copy in the page cache (8 bytes per owned node and per owned edge,
never a private copy). The original id is one more column of the rows the owner
already sends (:data:`ID_ATTR`): remote rows, direct same-machine reads and the
feature cache all carry it, so returning original ids costs no extra round trip.

**Original -> relabelled** (seeds, once per loader). :meth:`PartIds.find` scans the
partition's mapped ids in chunks against the sorted queries: O(chunk + queries) memory,
no whole-graph table, no sorted index kept (see :mod:`pyg_dist.loader.ids` for the
collective that asks every partition for the ids not owned here).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor

from pyg_dist.format.id_maps import read_part_ids
from pyg_dist.format.meta import PartitionMeta
from pyg_dist.typing import EdgeType, NodeType

Group = Union[NodeType, EdgeType]

#: the reserved attribute name under which owners send original ids with their rows
ID_ATTR = "__original_id__"
_CHUNK = 1 << 20


def partition_root(*stores: Any) -> Optional[str]:
    """The partition folder the stores were opened from (``None``: held in memory)."""
    for store in stores:
        source = getattr(store, "source", None)
        if source is not None:
            return source.root
        root = getattr(store, "root", None)
        if root is not None:
            return str(root)
        tables = getattr(store, "id_tables", None)
        if tables is not None and tables.root is not None:
            return str(tables.root)
    return None


class PartIds:
    """Original ids of the nodes and edges one partition owns, mapped from its files.

    Args:
        root (str or Path): the partition folder.
        meta (PartitionMeta): its description.
        part (int): the partition.
    """

    def __init__(self, root: Union[str, Path], meta: PartitionMeta, part: int) -> None:
        self.root, self.meta, self.part = str(root), meta, part
        self._tables: Dict[str, Dict[Group, Tensor]] = {}

    @classmethod
    def of_stores(cls, *stores: Any) -> "PartIds":
        """The tables of the partition the stores (feature and/or graph store) hold.

        Raises:
            NotImplementedError: for stores not opened from a partition folder.
        """
        root = partition_root(*stores)
        if root is None:
            raise NotImplementedError(
                f"original ids of partition {stores[0].part} need its folder: open the "
                f"stores with from_partition(root, pid)")
        return cls(root, stores[0].meta, stores[0].part)

    def table(self, kind: str, group: Group) -> Tensor:
        """Original ids of the owned nodes (``kind="node"``) or edges, in relabelled order."""
        if kind not in self._tables:
            self._tables[kind] = read_part_ids(self.root, self.meta, self.part, kind)
        return self._tables[kind][group]

    def original(self, kind: str, group: Group, ids: Tensor) -> Tensor:
        """Original ids of owned relabelled ``ids``."""
        book = self.meta.node_book(group) if kind == "node" else self.meta.edge_book(group)
        return self.table(kind, group).index_select(0, book.to_local(self.part, ids.long()))

    def find(self, group: NodeType, queries: Tensor) -> Tensor:
        """Relabelled ids of the original node ids ``queries`` (sorted, distinct) this
        partition owns, ``-1`` for the others."""
        out = torch.full_like(queries, -1)
        if queries.numel() == 0:
            return out
        table, start = self.table("node", group), self.meta.node_book(group).start(self.part)
        last = queries.numel() - 1
        for lo in range(0, table.numel(), _CHUNK):
            chunk = table[lo:lo + _CHUNK]
            pos = torch.searchsorted(queries, chunk).clamp_(max=last)
            hit = queries[pos] == chunk
            out[pos[hit]] = torch.nonzero(hit).view(-1) + (start + lo)
        return out


def check_ids(ids: Any, total: int, name: str) -> Tensor:
    """``ids`` as int64, raising naming ``name`` unless they are integers in ``[0, total)``."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a tensor of original ids, got {type(ids).__name__}")
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(f"{name} must hold integer ids, got dtype {ids.dtype}")
    ids = ids.long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= total):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(f"{name} holds original id {bad}, out of range [0, {total})")
    return ids

