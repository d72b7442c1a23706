"""The symmetric CSR adjacency METIS and the coarsening need, built from edge chunks.

Same algorithm and result as :func:`~pyg_dist.partition._graph_kernels.symmetric_csr`
(count pairs by their smaller endpoint, fill that upper triangle, sort and
deduplicate each row, mirror), but the edge lists are streamed chunk by chunk, twice,
and the upper triangle and the adjacency live in memory-mapped scratch files: only
the row pointers and cursors (int64 per node) are held in memory.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from pyg_dist.partition._common import type_offsets
from pyg_dist.partition._graph_kernels import (count_lower, dedup_rows, fill_lower,
                                        mirror_fill_windows, mirror_pointers)
from pyg_dist.partition._outofcore.scratch import Scratch, plain
from pyg_dist.partition._outofcore.source import ChunkedSource


def streaming_csr(source: ChunkedSource, scratch: Scratch, window: int = 1 << 24
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """``(xadj, adjncy)`` of the undirected, loop-free, duplicate-free graph of all edge
    types in the combined id space: ``xadj`` in memory, ``adjncy`` a memory map (int64)
    written in windows of ``window`` entries (scattered writes into a map larger than
    memory would rewrite its pages over and over).
    """
    offsets = type_offsets(source.num_nodes)
    total = source.total_nodes
    counts = np.zeros(total + 1, dtype=np.int64)
    for et in source.edge_names:
        for src, dst in source.edge_chunks(et):
            count_lower(src, dst, offsets[et[0]], offsets[et[2]], counts)
    ptr = np.cumsum(counts, out=counts)
    small = total <= np.iinfo(np.int32).max
    upper = plain(scratch.array("upper", np.int32 if small else np.int64, (int(ptr[-1]),)))
    cursor = ptr[:-1].copy()
    for et in source.edge_names:
        for src, dst in source.edge_chunks(et):
            fill_lower(src, dst, offsets[et[0]], offsets[et[2]], cursor, upper)
    del cursor
    ptr = dedup_rows(ptr, upper)
    xadj = mirror_pointers(ptr, upper)
    adjncy = plain(scratch.array("adjncy", np.int64, (int(xadj[-1]),)))
    mirror_fill_windows(ptr, upper, xadj, adjncy, window)
    scratch.drop(upper)
    return xadj, adjncy
