"""Original <-> relabelled ids of what one partition owns, for the stores' PyG interface.

At the API boundary ids are the dataset's original ids; inside, partition ``p`` owns the
relabelled range ``[offset, offset + n)``, and ``part_<p>/node_ids.pt`` / ``edge_ids.pt``
hold the original id of every owned row, in row order (see
:mod:`pyg_dist.format.id_maps`). :class:`OwnedIds` translates between the two for
owned ids only, with ``searchsorted`` over that (mapped) tensor when its ids increase
(node ids do: the partitioner keeps each partition's nodes in original order; nothing
private is built), else over a copy sorted once on first use (16 bytes per owned id;
edge ids, which are stored in CSC order). Nothing is sized by the whole graph.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.format.id_maps import read_part_ids
from pyg_dist.format.meta import PartitionMeta
from pyg_dist.typing import EdgeType, NodeType, edge_key

Group = Union[NodeType, EdgeType]


class OwnedIds:
    """The original ids of the rows one partition owns, for one node or edge type.

    Args:
        ids (Tensor): original id of every owned row, in row order (1-D int64).
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
        ids = check_ids(index, self.total, self.what, argument)
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


def check_ids(index: object, total: int, what: str, argument: str) -> Tensor:
    """``index`` as an int64 tensor of ids in ``[0, total)``, else a one-line error
    naming ``argument``.

    Raises:
        TypeError: not an integer tensor.
        ValueError: an id is out of range.
    """
    if isinstance(index, (list, tuple, range)):
        index = torch.as_tensor(list(index), dtype=torch.int64)
    if not isinstance(index, Tensor):
        raise TypeError(f"{argument} must be an integer tensor of original ids of {what}, "
                        f"got {type(index).__name__}")
    if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise TypeError(f"{argument} must be an integer tensor of original ids of {what}, "
                        f"got dtype {index.dtype}")
    ids = index.long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= total):
        bad = ids[(ids < 0) | (ids >= total)].reshape(-1)[0]
        raise ValueError(f"{argument} holds id {int(bad)} outside [0, {total}) of {what}")
    return ids


class PartitionIds:
    """Original ids of the nodes and edges of every partition of a folder, read on first
    use (mapped: only the pages looked at are read) and kept per partition.

    Args:
        meta (PartitionMeta): the partitioned graph.
        root (str, optional): the partition folder holding the id files; ``None`` for
            stores built in memory whose ids were never relabelled (original id =
            relabelled id).
    """

    def __init__(self, meta: PartitionMeta, root: Optional[str]) -> None:
        self.meta = meta
        self.root = root
        self._cache: Dict[Tuple[str, int], Dict[Group, OwnedIds]] = {}

    def owned(self, kind: str, group: Group, part: int) -> OwnedIds:
        """The :class:`OwnedIds` of ``group`` (a node type for ``kind="node"``, an edge
        type for ``"edge"``) in partition ``part``."""
        key = (kind, part)
        if key not in self._cache:
            self._cache[key] = self._read(kind, part)
        return self._cache[key][group]

    def _read(self, kind: str, part: int) -> Dict[Group, OwnedIds]:
        meta = self.meta
        offsets = meta.node_offsets if kind == "node" else meta.edge_offsets
        totals = meta.num_nodes if kind == "node" else meta.num_edges
        if self.root is not None:
            ids = read_part_ids(self.root, meta, part, kind)
        else:
            ids = {t: torch.arange(offsets[t][part], offsets[t][part + 1]) for t in offsets}
        return {t: OwnedIds(v, offsets[t][part], totals[t], _what(kind, t), part)
                for t, v in ids.items()}

    def to_original(self, kind: str, group: Group, relabelled: Tensor) -> Tensor:
        """Original ids of relabelled ids of any partition (each owner's id file is read
        where needed: for a halo, the pages of the halo's ids)."""
        book = self.meta.node_book(group) if kind == "node" else self.meta.edge_book(group)
        out = torch.empty_like(relabelled)
        owner = book.owner(relabelled)
        for part in torch.unique(owner).tolist():
            mask = owner == part
            owned = self.owned(kind, group, part)
            out[mask] = owned.ids[relabelled[mask] - owned.offset]
        return out

    def __getstate__(self) -> dict:
        return {"meta": self.meta, "root": self.root, "_cache": {}}


def _what(kind: str, group: Group) -> str:
    return f"node type '{group}'" if kind == "node" else f"edge type {edge_key(group)}"
