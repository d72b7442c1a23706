"""Every place where inference reads or writes ``DistTensor`` rows or seeds a loader by id.

Inside :mod:`pyg_dist.inference` nodes are named by their **relabelled** (range) ids:
partition ``p`` owns ``[node_offsets[p], node_offsets[p+1])`` and a ``DistTensor``
created with ``partition=`` the node book keeps a node's row at that id. Loaders take
and batches return the dataset's original ids (``batch.part_n_id`` holds the relabelled
ones), so loader seeds are translated here; nothing else in the package indexes a
``DistTensor`` or a batch by id. Exports are written in original ids.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.embedding import DistTensor
from pyg_dist.format.book import RangeBook

_RUNS = itertools.count()


@dataclass
class FetchStats:
    """Rows (and their bytes) this process read from other ranks, since the last reset.

    Args:
        rows (int): distinct remote rows per request, summed over requests.
        bytes (int): their size in bytes.
    """
    rows: int = 0
    bytes: int = 0


FETCHED = FetchStats()


def reset_fetch_stats() -> FetchStats:
    """Returns the counts so far and starts counting afresh."""
    done = FetchStats(FETCHED.rows, FETCHED.bytes)
    FETCHED.rows = FETCHED.bytes = 0
    return done


def count_fetched(num_rows: int, row_bytes: int) -> None:
    FETCHED.rows += num_rows
    FETCHED.bytes += num_rows * row_bytes


def run_prefix() -> str:
    """A name prefix for one inference run (the same on every rank: runs are collective
    and every rank makes them in the same order)."""
    return f"pyg_dist.inference.{next(_RUNS)}"


def node_rows(name: str, book: RangeBook, dim: int,
              fill: Optional[Callable[[int, int], Tensor]] = None,
              chunk: int = 65536) -> DistTensor:
    """A float32 ``[num_nodes, dim]`` tensor sharded like the graph (collective).

    Args:
        name (str): the tensor's name (the same on every rank).
        book (RangeBook): the node partition book.
        dim (int): the row width.
        fill (callable, optional): ``fill(start, stop)`` gives the rows of relabelled
            ids ``[start, stop)``; this rank's rows are filled with it, ``chunk`` rows at
            a time. (default: zeros)
        chunk (int): rows filled at a time.
    """
    tensor = DistTensor((book.total, dim), dtype=torch.float32, name=name, partition=book)
    if fill is not None:
        start, stop = tensor.local_range
        for lo in range(start, stop, chunk):
            hi = min(lo + chunk, stop)
            write_own_rows(tensor, lo, fill(lo, hi).to(torch.float32))
    return tensor


def own_range(tensor: DistTensor) -> Tuple[int, int]:
    """Relabelled ids ``[start, stop)`` of the rows this rank owns (and computes)."""
    return tensor.local_range


def read_rows(tensor: DistTensor, ids: Tensor) -> Tensor:
    """Rows of relabelled ``ids``: own rows directly, every other owner's in one request."""
    start, stop = tensor.local_range
    remote = ids[(ids < start) | (ids >= stop)]
    if remote.numel():
        count_fetched(int(torch.unique(remote).numel()), 4 * int(tensor.shape[1]))
    return tensor[ids]


def write_own_rows(tensor: DistTensor, start: int, values: Tensor) -> None:
    """Writes rows of this rank's own relabelled ids ``[start, start + len(values))``."""
    first, stop = tensor.local_range
    if not first <= start <= start + values.size(0) <= stop:
        raise ValueError(f"rows [{start}, {start + values.size(0)}) are not owned by this "
                         f"rank ([{first}, {stop}))")
    with tensor.lock:
        tensor.local_data[start - first:start - first + values.size(0)] = values


def write_rows(tensor: DistTensor, ids: Tensor, values: Tensor) -> None:
    """Writes ``values`` to the rows of relabelled ``ids`` (at their owners)."""
    tensor[ids.cpu()] = values


def own_rows(tensor: DistTensor, start: int, stop: int) -> Tensor:
    """A copy of this rank's own rows of relabelled ids ``[start, stop)``."""
    first, _ = tensor.local_range
    with tensor.lock:
        return tensor.local_data[start - first:stop - first].clone()


def release(tensor: DistTensor) -> None:
    """Frees this rank's rows of an intermediate tensor nobody reads any more (every rank
    must have passed a barrier after its last read)."""
    with tensor.lock:
        tensor.local_data.set_()


def seeds_of(features: object, start: int, stop: int) -> Tensor:
    """Loader seeds for the nodes of relabelled ids ``[start, stop)``: loaders take the
    dataset's original ids, which the partition's id table gives."""
    node_type = features.meta.node_types[0]
    return features.id_tables.to_original("node", node_type, torch.arange(start, stop))


def count_batch_fetches(batch: object, part_start: int, part_stop: int, row_bytes: int) -> None:
    """Counts the rows of a loader batch that came from other partitions."""
    n_id = batch.part_n_id
    count_fetched(int(((n_id < part_start) | (n_id >= part_stop)).sum()), row_bytes)


def batch_seeds(batch: object) -> Tensor:
    """The relabelled ids of a loader batch's seed nodes (its first ``batch_size`` nodes;
    ``batch.n_id`` holds their original ids)."""
    return batch.part_n_id[:batch.batch_size]
