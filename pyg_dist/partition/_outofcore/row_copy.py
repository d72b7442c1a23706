"""Node and edge data rows copied block by block into per-partition arrays.

Each data array is read in blocks of rows (bounded by the memory budget; ``.npy``
chunks are memory-mapped, so a block costs only its bytes) and every row is written
to its new position in the array of the partition that owns it: per partition one
memory-mapped scratch file, later saved as it is into the partition's ``.pt`` file.
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np

from pyg_dist.partition._graph_kernels import sorted_unique
from pyg_dist.format._meta import AttrSpec
from pyg_dist.partition._outofcore.scratch import Scratch

Reader = Callable[[int, int], np.ndarray]


def part_arrays(scratch: Scratch, name: str, spec: AttrSpec, offsets: Sequence[int]
                ) -> List[np.ndarray]:
    """One zero-filled array per partition, ``[owned rows, *row shape]`` of ``spec``'s dtype."""
    return [scratch.array(f"{name}-{p}", np.dtype(spec.dtype), (hi - lo, *spec.shape))
            for p, (lo, hi) in enumerate(zip(offsets[:-1], offsets[1:]))]


def scatter_rows(read: Reader, new_ids: Reader, total: int, offsets: Sequence[int],
                 outs: List[np.ndarray], block: int) -> None:
    """Copies rows ``[0, total)`` to their owners' arrays, ``block`` rows at a time.

    Args:
        read: ``read(lo, hi)``, rows ``[lo, hi)`` in original order.
        new_ids: ``new_ids(lo, hi)``, the new global ids of those rows.
        offsets: partition ``p`` owns new ids ``[offsets[p], offsets[p + 1])``.
        outs: per partition, its array (row ``i`` is new id ``offsets[p] + i``).
    """
    bounds = np.asarray(offsets, dtype=np.int64)
    for lo in range(0, total, block):
        hi = min(lo + block, total)
        rows, new = read(lo, hi), np.asarray(new_ids(lo, hi))
        parts = np.searchsorted(bounds, new, side="right") - 1
        for p in sorted_unique(parts):
            mine = parts == p
            outs[p][new[mine] - bounds[p]] = rows[mine]


def gather_rows(arrays: List[np.ndarray], offsets: Sequence[int], ids: np.ndarray,
                spec: AttrSpec) -> np.ndarray:
    """Rows of new global ``ids`` (any partitions) from the per-partition ``arrays``."""
    out = np.empty((ids.shape[0], *spec.shape), dtype=np.dtype(spec.dtype))
    bounds = np.asarray(offsets, dtype=np.int64)
    parts = np.searchsorted(bounds, ids, side="right") - 1
    for p in sorted_unique(parts):
        mine = parts == p
        out[mine] = arrays[p][ids[mine] - bounds[p]]
    return out


def row_bytes(spec: AttrSpec) -> int:
    return int(np.dtype(spec.dtype).itemsize * np.prod(spec.shape, dtype=np.int64))
