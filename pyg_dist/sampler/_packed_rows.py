"""A partition's one-value columns packed row by row, so a batch reads them in one pass.

Besides its feature rows, a batch reads several columns holding one value per node
(labels, masks, original ids). Each is a random read of its own table: on a
products-scale partition (2.4M rows) five such columns cost five cache misses per
sampled node. :class:`PackedColumns` keeps the values of one row side by side (a record
of 16 or 24 bytes, widest values first, each at an offset its size divides), built once
from the partition's columns and rebuilt when one of them changes (another tensor put
in its place, or one written in place). A batch then gathers one record per node
(:func:`~pyg_dist.sampler._gather.place`, one miss per row) and unpacks each column with
a sequential copy.

The packed table is a copy: ``16-24`` bytes per owned row, held by the process that
reads the partition (a mapped partition's files stay shared; this copy does not).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, Hashable, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist._madvise import empty_large
from pyg_dist.sampler._gather import Rows, place

#: the widest value a packed column may hold (bytes)
NARROW_BYTES = 8
#: the fewest bytes of one-value columns worth packing. Below it they stay in cache
#: between batches and separate passes cost no more: measured on a 200k-node graph
#: (15 bytes a row, 1.5-3 MB), packing was neutral to 10% slower; on 2.4M rows (36 MB)
#: it saved ~18 ms of CPU per batch.
MIN_PACKED_BYTES = 8 << 20


def packable(columns: Dict[str, Tensor], outputs: Dict[str, Tensor]) -> List[str]:
    """The attributes worth packing: 1-D columns of at most :data:`NARROW_BYTES` per
    value, as long as the others, read into 1-D outputs (none when fewer than two, or
    when they hold fewer than :data:`MIN_PACKED_BYTES`)."""
    names = [a for a, c in columns.items() if c.dim() == 1 and outputs[a].dim() == 1
             and c.element_size() <= NARROW_BYTES]
    if len(names) < 2 or len({columns[a].size(0) for a in names}) != 1 or \
            sum(columns[a].numel() * columns[a].element_size() for a in names) < \
            MIN_PACKED_BYTES:
        return []
    return names


@dataclass
class Packed:
    """One record per row: ``table[r, offset:offset + size]`` holds column ``attr``'s
    value of row ``r`` (``fields[attr] = (offset, dtype)``).

    Attributes:
        table: ``[rows, width]`` uint8, ``width`` a multiple of :data:`NARROW_BYTES`.
        fields: offset and dtype of every column's value.
        sources: the columns it was packed from (kept, so none is freed and replaced
            by another at the same address).
        versions: their in-place write counters when packed.
    """
    table: Tensor
    fields: Dict[str, Tuple[int, torch.dtype]]
    sources: Tuple[Tensor, ...]
    versions: Tuple[int, ...]

    def matches(self, columns: Dict[str, Tensor]) -> bool:
        """Whether it still holds exactly ``columns``' values."""
        return list(columns) == list(self.fields) and all(
            c is s and c._version == v
            for c, s, v in zip(columns.values(), self.sources, self.versions))


def field(records: Tensor, offset: int, dtype: torch.dtype) -> Tensor:
    """The 1-D (strided) view of one field of ``[rows, width]`` uint8 records."""
    size = dtype.itemsize
    return records[:, offset:offset + size].view(dtype).view(-1) if records.size(0) else \
        torch.empty(0, dtype=dtype)


def pack(columns: Dict[str, Tensor]) -> Packed:
    """Packs ``columns`` (1-D, of equal length) into one record per row."""
    order = sorted(columns, key=lambda a: -columns[a].element_size())  # stable: aligned
    fields, at = {}, 0
    for attr in order:
        fields[attr] = (at, columns[attr].dtype)
        at += columns[attr].element_size()
    width = -(-at // NARROW_BYTES) * NARROW_BYTES
    rows = next(iter(columns.values())).size(0)
    table = empty_large((rows, width), torch.uint8)
    if width > at:
        table[:, at:].zero_()
    for attr, (offset, dtype) in fields.items():
        field(table, offset, dtype).copy_(columns[attr])
    fields = {a: fields[a] for a in columns}  # in the columns' order
    return Packed(table, fields, tuple(columns.values()),
                  tuple(c._version for c in columns.values()))


def unpack(records: Tensor, packed: Packed, outputs: Dict[str, Tensor], rows: Rows) -> None:
    """Copies every field of gathered ``records`` into its output at rows ``rows``
    (a range, or positions), widening where the output is wider (int32 ids)."""
    for attr, (offset, dtype) in packed.fields.items():
        values, out = field(records, offset, dtype), outputs[attr]
        if isinstance(rows, tuple):
            out.narrow(0, rows[0], rows[1] - rows[0]).copy_(values)
        else:  # the row-copy kernel scatters (and widens) faster than index_copy_
            place(out, rows, values.contiguous(), None)


class PackedColumns:
    """The packed columns of one partition, per key (e.g. node type and attributes),
    built on first use and rebuilt when a column changed."""

    def __init__(self) -> None:
        self._packs: Dict[Hashable, Packed] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, columns: Dict[str, Tensor]) -> Packed:
        """The records of ``columns`` (1-D, of equal length) under ``key``."""
        with self._lock:
            found: Optional[Packed] = self._packs.get(key)
            if found is None or not found.matches(columns):
                found = self._packs[key] = pack(columns)
            return found
