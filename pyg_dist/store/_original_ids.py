"""Original <-> relabelled ids: the rule, and the one module that translates.

**The rule.** Every node or edge id a user gives to or gets from pyg_dist's public API
is the dataset's original id (PyG's, GraphLearn's and ``torch_geometric.distributed``'s
rule): ``input_nodes``, ``edge_label_index``, ``labels`` (over all nodes in dataset
order), ``node_split``/``edge_split`` results, ``batch.n_id``/``e_id``,
``DistTensor``/``DistEmbedding`` indices of graph nodes, the stores' ``get_tensor``
and the whole-graph view :class:`~pyg_dist.DistGraph`. The partitioner's relabelled
range ids (partition ``p`` owns ``[node_offsets[p], node_offsets[p + 1])``) are
internal; they are available under explicit names (``batch.part_n_id``/``part_e_id``,
``relabelled=True``, :meth:`LocalFeatureStore.gather`).

**The tables.** ``part_<p>/node_ids.pt`` / ``edge_ids.pt`` (format v2; v1's root maps
are read by :func:`~pyg_dist.format._id_maps.read_part_ids`) hold the original id of
every row partition ``p`` owns, in row order, *mapped*: every process of a machine
shares one copy in the page cache (4 bytes per owned node and per owned edge, int32,
where every id of the file fits, else 8; never a private copy of the whole graph). :class:`OwnedIds` answers for one type of one
partition: relabelled -> original is an index into the mapped tensor; original ->
relabelled is a ``searchsorted`` over it when its ids increase (node ids do: the
partitioner keeps each partition's nodes in original order, so nothing private is
built), else a chunked scan (:meth:`OwnedIds.find`, O(chunk + queries) memory) or, for
repeated lookups (:meth:`OwnedIds.to_rows`), a copy sorted once (16 bytes per owned id;
edge ids, stored in CSC order). :class:`PartitionIds` holds them for every partition
of a folder (read on first use); :class:`PartIds` is one partition's view, as samplers
and loaders use it. Ids a partition does not own are asked of the others by
:mod:`pyg_dist.loader._id_collective` (one collective) or :mod:`pyg_dist.loader._graph_view` (one
RPC per partition).
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.format._id_maps import read_part_ids
from pyg_dist.format._meta import PartitionMeta
from pyg_dist._typing import EdgeType, NodeType, edge_key

Group = Union[NodeType, EdgeType]

#: the reserved attribute name under which owners send original ids with their rows:
#: remote rows, direct same-machine reads and the feature cache all carry it, so
#: relabelled -> original for batches costs no extra round trip
ID_ATTR = "__original_id__"

_CHUNK = 1 << 20


def check_ids(ids: Any, total: int, argument: str, what: str = "") -> Tensor:
    """``ids`` as an int64 tensor of ids in ``[0, total)``, else a one-line error naming
    ``argument`` (lists, tuples and ranges of ints are accepted).

    Args:
        ids: the ids given.
        total (int): the number of ids of their type in the whole graph.
        argument (str): the caller's argument name (e.g. ``"input_nodes"``).
        what (str): the type, for the message (e.g. ``"node type 'paper'"``).

    Raises:
        TypeError: not an integer tensor.
        ValueError: an id is out of range.
    """
    of = f" of {what}" if what else ""
    if isinstance(ids, (list, tuple, range)):
        try:
            ids = torch.as_tensor(list(ids), dtype=torch.int64)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"{argument} must hold integer original ids{of}: {exc}") from None
    if not isinstance(ids, Tensor):
        raise TypeError(f"{argument} must be an integer tensor of original ids{of}, got "
                        f"{type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{argument} must be an integer tensor of original ids{of}, got "
                        f"dtype {ids.dtype}")
    ids = ids.long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= total):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(f"{argument} holds original id {bad} outside [0, {total}){of}")
    return ids


def take_rows(tensor: Tensor, rows: Tensor) -> Tensor:
    """``tensor[rows]`` for ``rows`` of any shape (one row per entry)."""
    return tensor.index_select(0, rows.reshape(-1)).reshape(*rows.shape, *tensor.shape[1:])


class OwnedIds:
    """The original ids of the rows one partition owns, for one node or edge type.

    Args:
        ids (Tensor): original id of every owned row, in row order (1-D int64 or
            int32, as the id file stores it).
        offset (int): relabelled id of row 0.
        total (int): number of ids of this type in the whole graph (ids lie in
            ``[0, total)``).
        what (str): the type, for error messages (e.g. ``"node type 'paper'"``).
        part (int): the partition, for error messages.
    """

    def __init__(self, ids: Tensor, offset: int, total: int, what: str, part: int) -> None:
        self.ids = ids
        self.offset = offset
        self.total = total
        self.what = what
        self.part = part
        self._sorted: Optional[Tuple[Tensor, Optional[Tensor]]] = None

    @property
    def num_owned(self) -> int:
        return self.ids.numel()

    def _table(self) -> Tuple[Tensor, Optional[Tensor]]:
        """``(sorted original ids, row of each)``, built once on first use. Ids already
        increasing (pyg_dist's partitioner keeps each partition's nodes in original
        order) are their own table: the mapped file, nothing private, row = position."""
        if self._sorted is None:
            ids = self.ids
            if ids.numel() < 2 or bool((ids[1:] > ids[:-1]).all()):
                self._sorted = (ids, None)
            else:
                values, order = torch.sort(ids)
                self._sorted = (values, order)
        return self._sorted

    def to_rows(self, index: object, argument: str = "index") -> Tensor:
        """Rows (``0 .. num_owned - 1``) of owned original ids.

        Args:
            index (Tensor): original ids (integer tensor, any shape).
            argument (str): the caller's argument name, for error messages.

        Raises:
            TypeError: ``index`` is not an integer tensor.
            ValueError: an id lies outside ``[0, total)`` or is not owned here.
        """
        ids = check_ids(index, self.total, argument, self.what)
        if ids.numel() == 0:
            return ids.new_empty(ids.shape)
        values, order = self._table()
        pos = torch.searchsorted(values, ids).clamp_(max=max(values.numel() - 1, 0))
        missing = ids != values[pos] if values.numel() else torch.ones_like(ids, dtype=torch.bool)
        if bool(missing.any()):
            raise ValueError(f"{argument} holds original id {int(ids[missing][0])} of "
                             f"{self.what} that partition {self.part} does not own "
                             f"({int(missing.sum())} such id(s)); it owns {self.num_owned} "
                             f"of {self.total}")
        return pos if order is None else order[pos]

    def to_relabelled(self, index: object, argument: str = "index") -> Tensor:
        """Relabelled ids of owned original ids (see :meth:`to_rows`)."""
        return self.to_rows(index, argument) + self.offset

    def increasing(self) -> bool:
        """Whether the owned ids increase (then they are their own lookup table)."""
        return self._table()[1] is None if self._sorted is not None else \
            self.ids.numel() < 2 or bool((self.ids[1:] > self.ids[:-1]).all())

    def find(self, queries: Tensor) -> Tensor:
        """Relabelled ids of the original ids ``queries`` (sorted, distinct, in range)
        this partition owns, ``-1`` for the others. Never sorts a private copy: a
        ``searchsorted`` when the owned ids increase (or a sorted table exists), else a
        scan of the mapped ids in chunks against ``queries``."""
        out = torch.full_like(queries, -1)
        if queries.numel() == 0 or self.ids.numel() == 0:
            return out
        if self._sorted is not None or self.increasing():
            values, order = self._table() if self._sorted is not None else (self.ids, None)
            pos = torch.searchsorted(values, queries).clamp_(max=values.numel() - 1)
            hit = values[pos] == queries
            rows = pos[hit] if order is None else order[pos[hit]]
            out[hit] = rows + self.offset
            return out
        last = queries.numel() - 1
        for lo in range(0, self.ids.numel(), _CHUNK):
            chunk = self.ids[lo:lo + _CHUNK]
            pos = torch.searchsorted(queries, chunk).clamp_(max=last)
            hit = queries[pos] == chunk
            out[pos[hit]] = torch.nonzero(hit).view(-1) + (self.offset + lo)
        return out


class PartitionIds:
    """Original ids of the nodes and edges of every partition of a folder, read on first
    use (mapped: only the pages looked at are read) and kept per partition.

    Args:
        meta (PartitionMeta): the partitioned graph.
        root (str, optional): the partition folder holding the id files; ``None`` for
            stores built in memory (original id = relabelled id, unless ``held``).
        held (dict, optional): the tables of a partitioning built in memory, by
            ``(kind, partition)`` (:mod:`pyg_dist.store._memory_partition`): every
            partition's nodes (from the partition book), this partition's edges.
    """

    def __init__(self, meta: PartitionMeta, root: Optional[str],
                 held: Optional[Dict[Tuple[str, int], Dict[Group, "OwnedIds"]]] = None
                 ) -> None:
        self.meta = meta
        self.root = root
        self.held = held
        self._cache: Dict[Tuple[str, int], Dict[Group, OwnedIds]] = dict(held or {})

    def owned(self, kind: str, group: Group, part: int) -> OwnedIds:
        """The :class:`OwnedIds` of ``group`` (a node type for ``kind="node"``, an edge
        type for ``"edge"``) in partition ``part``."""
        key = (kind, part)
        if key not in self._cache:
            if self.held is not None:
                raise ValueError(f"the original {kind} ids of partition {part} are held by "
                                 f"the rank serving it (stores built in memory)")
            self._cache[key] = self._read(kind, part)
        return self._cache[key][group]

    def _read(self, kind: str, part: int) -> Dict[Group, OwnedIds]:
        meta = self.meta
        offsets = meta.node_offsets if kind == "node" else meta.edge_offsets
        totals = meta.num_nodes if kind == "node" else meta.num_edges
        if self.root is not None:
            ids = read_part_ids(self.root, meta, part, kind, as_stored=True)
        else:
            ids = {t: torch.arange(offsets[t][part], offsets[t][part + 1]) for t in offsets}
        return {t: OwnedIds(v, offsets[t][part], totals[t], _what(kind, t), part)
                for t, v in ids.items()}

    def to_original(self, kind: str, group: Group, relabelled: Tensor) -> Tensor:
        """Original ids of relabelled ids of any partition (each owner's id file is read
        where needed: for a halo, the pages of the halo's ids)."""
        book = self.meta.node_book(group) if kind == "node" else self.meta.edge_book(group)
        out = torch.empty(relabelled.shape, dtype=torch.int64)
        owner = book.owner(relabelled)
        for part in torch.unique(owner).tolist():
            mask = owner == part
            owned = self.owned(kind, group, part)
            out[mask] = owned.ids[relabelled[mask] - owned.offset].long()
        return out

    def __getstate__(self) -> dict:
        return {"meta": self.meta, "root": self.root, "held": self.held,
                "_cache": dict(self.held or {})}


def _what(kind: str, group: Group) -> str:
    return f"node type '{group}'" if kind == "node" else f"edge type {edge_key(group)}"


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
    """One partition's view of :class:`PartitionIds`, as samplers and loaders use it.

    Args:
        root (str or Path, optional): the partition folder (``None``: tables held in
            memory, :attr:`PartitionIds.held`).
        meta (PartitionMeta): its description.
        part (int): the partition.
        tables (PartitionIds, optional): the folder's tables to share (default: new).
    """

    def __init__(self, root: Optional[Union[str, Path]], meta: PartitionMeta, part: int,
                 tables: Optional[PartitionIds] = None) -> None:
        self.root, self.meta, self.part = None if root is None else str(root), meta, part
        self.tables = tables if tables is not None else PartitionIds(meta, self.root)

    @classmethod
    def of_stores(cls, *stores: Any) -> "PartIds":
        """The tables of the partition the stores (feature and/or graph store) hold,
        sharing the stores' own :class:`PartitionIds` when they have one.

        Raises:
            NotImplementedError: for stores not opened from a partition folder.
        """
        root = partition_root(*stores)
        held = next((s.id_tables for s in stores
                     if getattr(getattr(s, "id_tables", None), "held", None) is not None), None)
        if root is None and held is None:
            raise NotImplementedError(
                f"original ids of partition {stores[0].part} need its folder: open the "
                f"stores with from_partition(root, pid)")
        tables = held or next((s.id_tables for s in stores
                               if getattr(s, "id_tables", None) is not None
                               and s.id_tables.root == root), None)
        return cls(root, stores[0].meta, stores[0].part, tables)

    def owned(self, kind: str, group: Group) -> OwnedIds:
        """The :class:`OwnedIds` of ``group`` in this partition."""
        return self.tables.owned(kind, group, self.part)

    def table(self, kind: str, group: Group) -> Tensor:
        """Original ids of the owned nodes (``kind="node"``) or edges, in relabelled order,
        as the id file stores them (mapped; int32 or int64)."""
        return self.owned(kind, group).ids

    def original(self, kind: str, group: Group, ids: Tensor) -> Tensor:
        """Original ids of owned relabelled ``ids``."""
        book = self.meta.node_book(group) if kind == "node" else self.meta.edge_book(group)
        table = self.table(kind, group)
        return table.index_select(0, book.to_local(self.part, ids.long())).long()

    def find(self, group: Group, queries: Tensor, kind: str = "node") -> Tensor:
        """Relabelled ids of the original ids ``queries`` (sorted, distinct) this
        partition owns, ``-1`` for the others (:meth:`OwnedIds.find`)."""
        return self.owned(kind, group).find(queries)


class BatchIds:
    """The relabelled ids of the original id tensors of recent batches, found by the
    tensor's identity: ``emb(batch.n_id)`` then needs no translation at all (the
    loader registers ``batch.n_id -> batch.part_n_id`` as it hands a batch out). Holds
    at most ``capacity`` entries, each only while its ``n_id`` tensor is alive.

    Args:
        capacity (int): the most batches remembered (oldest forgotten first).
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._entries: "OrderedDict[int, Tuple[weakref.ref, Tensor]]" = OrderedDict()
        # re-entrant: a tensor collected while the lock is held runs _forget right away
        self._lock = threading.RLock()

    def remember(self, original: Tensor, relabelled: Tensor) -> None:
        """Records that ``original`` (this very tensor) holds the ids ``relabelled``."""
        key = id(original)
        try:
            ref = weakref.ref(original, lambda _, k=key: self._forget(k))
        except TypeError:  # not weak-referenceable: nothing to remember it by
            return
        with self._lock:
            self._entries[key] = (ref, relabelled)
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def recall(self, original: object) -> Optional[Tensor]:
        """The relabelled ids recorded for ``original`` (the same tensor object, not a
        copy), else ``None``."""
        with self._lock:
            entry = self._entries.get(id(original))
        if entry is None or entry[0]() is not original:
            return None
        return entry[1]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._entries.pop(key, None)


#: the batches this process's loaders handed out (see :class:`BatchIds`)
BATCH_IDS = BatchIds()
