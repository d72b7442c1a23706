"""The 1-hop in-neighbourhood of a batch of destination nodes, from a partition's CSC."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Tuple

import torch
from torch import Tensor

from pyg_dist.store._graph_store import CSC


@dataclass
class OneHop:
    """Destinations ``[start, stop)`` (global relabelled ids) and every in-edge of them.

    Args:
        start (int): first destination.
        stop (int): one past the last destination.
        n_id (Tensor): global ids of the source nodes. With ``dst_first`` (sources and
            destinations of one node type): the destinations first (in order), then
            their other in-neighbours (sorted); else the sources (sorted).
        edge_index (Tensor): ``[2, E]`` local ``(src, dst)`` positions: sources into
            ``n_id``, destinations into ``[start, stop)``.
        dst_first (bool): whether ``n_id`` starts with the destinations.
    """
    start: int
    stop: int
    n_id: Tensor
    edge_index: Tensor
    dst_first: bool = True

    @property
    def num_dst(self) -> int:
        return self.stop - self.start


def one_hop(csc: CSC, start: int, stop: int, same_type: bool = True) -> OneHop:
    """The in-edges of destinations ``[start, stop)``, all owned by ``csc``'s partition.

    Args:
        csc (CSC): the partition's in-edges of one edge type.
        start (int): first global destination id (``csc.dst_offset <= start``).
        stop (int): one past the last (``stop <= csc.dst_offset + csc.num_dst``).
        same_type (bool): sources and destinations are nodes of one type, so the
            subgraph lists the destinations first among its nodes (``dst_first``).
    """
    lo, hi = start - csc.dst_offset, stop - csc.dst_offset
    if not 0 <= lo <= hi <= csc.num_dst:
        raise ValueError(f"destinations [{start}, {stop}) are not owned by this partition "
                         f"([{csc.dst_offset}, {csc.dst_offset + csc.num_dst}))")
    ptr = csc.indptr[lo:hi + 1].long()
    first, last = (int(ptr[0]), int(ptr[-1])) if ptr.numel() else (0, 0)
    src = csc.indices[first:last].long()  # a copy: mapped files are read once here
    dst = torch.arange(hi - lo).repeat_interleave(ptr[1:] - ptr[:-1])
    if not same_type:
        n_id, local = torch.unique(src, return_inverse=True)
        return OneHop(start, stop, n_id, torch.stack([local.view(-1), dst]), dst_first=False)
    inside = (src >= start) & (src < stop)
    outside, inverse = torch.unique(src[~inside], return_inverse=True)
    local = torch.empty_like(src)
    local[inside] = src[inside] - start
    local[~inside] = inverse + (hi - lo)
    n_id = torch.cat([torch.arange(start, stop), outside])
    return OneHop(start, stop, n_id, torch.stack([local, dst]))


def ranges(start: int, stop: int, batch_size: int) -> Iterator[Tuple[int, int]]:
    """``[start, stop)`` in consecutive pieces of at most ``batch_size`` ids."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    for lo in range(start, stop, batch_size):
        yield lo, min(lo + batch_size, stop)
