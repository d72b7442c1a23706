"""Which rank owns which rows of a :class:`~pyg_dist.embedding.DistTensor`.

Every row has exactly one owner rank, and each rank owns one contiguous range of
global row ids, so the whole layout is ``world_size + 1`` offsets (a
:class:`~pyg_dist.partition.RangeBook` over ranks) and an owner lookup is a
``searchsorted``.

* **Node-aligned** tensors follow the graph's partition book: partition ``p``'s
  rows ``[offsets[p], offsets[p+1])`` belong to the ranks serving ``p``
  (:meth:`DistContext.ranks_of`). With ``k`` ranks per partition (trainers sharing
  a machine) that range is split evenly into ``k`` consecutive pieces, the first
  ones one row longer when it does not divide; rank ``p * k + j`` owns piece ``j``.
  Rows therefore always live on a rank that loaded their partition.
* Tensors that are not node-aligned are split evenly over the ranks.
* With one process (standalone mode) the single rank owns everything.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.format._book import RangeBook
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.sampler._id_lookup import relabel
from pyg_dist.rpc import _runtime as runtime

PartitionLike = Union[RangeBook, PartitionMeta, Sequence[int], None]


def even_split(start: int, stop: int, pieces: int) -> List[int]:
    """Boundaries splitting ``[start, stop)`` into ``pieces`` near-equal ranges.

    The first ``(stop - start) % pieces`` ranges are one longer than the others.
    """
    size, extra = divmod(stop - start, pieces)
    bounds = [start]
    for i in range(pieces):
        bounds.append(bounds[-1] + size + (1 if i < extra else 0))
    return bounds


def resolve_book(partition: PartitionLike, node_type: Optional[str],
                 num_rows: int) -> Optional[RangeBook]:
    """Turns the user's ``partition`` argument into a node partition book (or ``None``).

    Args:
        partition: a :class:`RangeBook`, node offsets (``num_parts + 1`` integers), a
            :class:`PartitionMeta` (with ``node_type`` for heterogeneous graphs), or
            ``None`` for a tensor that is not node-aligned.
        node_type: the node type whose rows the tensor holds (with a meta).
        num_rows: the tensor's number of rows; must equal the book's number of ids.
    """
    if partition is None:
        if node_type is not None:
            raise ValueError(f"node_type={node_type!r} was given without a partition "
                             f"(pass partition=PartitionMeta or a RangeBook)")
        return None
    if isinstance(partition, PartitionMeta):
        book = partition.node_book(node_type)
    elif isinstance(partition, RangeBook):
        book = partition
    elif isinstance(partition, (list, tuple, Tensor)):
        book = RangeBook([int(x) for x in partition], name="node ids")
    else:
        raise TypeError(f"partition must be a RangeBook, a PartitionMeta, node offsets or "
                        f"None, got {type(partition).__name__}")
    if book.total != num_rows:
        raise ValueError(f"the tensor has {num_rows} rows but its partition book "
                         f"({book.name}) covers {book.total} ids: rows must be the nodes "
                         f"of one type")
    return book


def rank_offsets(num_rows: int, world_size: int, book: Optional[RangeBook]) -> List[int]:
    """The first row of every rank's shard (``world_size + 1`` entries).

    Raises:
        ValueError: if ``world_size`` is not a multiple of the book's partitions.
    """
    if world_size == 1:
        return [0, num_rows]
    if book is None:
        return even_split(0, num_rows, world_size)
    parts = book.num_parts
    if world_size % parts != 0:
        raise ValueError(f"world_size={world_size} ranks cannot share {parts} partition(s) "
                         f"evenly: use a multiple of {parts} processes")
    per_part = world_size // parts
    bounds = [0]
    for p in range(parts):
        bounds.extend(even_split(book.start(p), book.start(p) + book.size(p), per_part)[1:])
    return bounds


@dataclass(frozen=True)
class ShardLayout:
    """Row ownership of one distributed tensor.

    Args:
        offsets (Tuple[int, ...]): rank ``r`` owns global rows
            ``[offsets[r], offsets[r+1])``.
        rank (int): this process's rank.
    """
    offsets: Tuple[int, ...]
    rank: int

    @classmethod
    def build(cls, num_rows: int, world_size: int, rank: int,
              book: Optional[RangeBook]) -> "ShardLayout":
        return cls(tuple(rank_offsets(num_rows, world_size, book)), rank)

    @property
    def world_size(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def start(self) -> int:
        """First global row of this rank's shard."""
        return int(self.offsets[self.rank])

    @property
    def stop(self) -> int:
        """One past the last global row of this rank's shard."""
        return int(self.offsets[self.rank + 1])

    def range_of(self, rank: int) -> Tuple[int, int]:
        return int(self.offsets[rank]), int(self.offsets[rank + 1])

    def owner(self, ids: Tensor) -> Tensor:
        """The rank owning each (already range-checked) global row id."""
        if self.world_size == 1:
            return torch.zeros_like(ids)
        upper = torch.as_tensor(self.offsets[1:], dtype=torch.long)
        return torch.searchsorted(upper, ids, right=True)


class GraphRows:
    """Original node ids -> rows of a tensor that follows a partitioned graph.

    Rows of a node-aligned tensor are the graph's relabelled node ids (rows of
    partition ``p`` live on its ranks). The translation uses the id tables of the
    partition this process serves (:func:`pyg_dist.init_rpc` with stores, or any
    loader): owned ids from its mapped table, the others asked of the other partitions
    in one round trip (:func:`~pyg_dist.sampler._id_lookup.relabel`).

    Args:
        meta (PartitionMeta): the partitioned graph.
        node_type (str, optional): the node type of the rows (heterogeneous graphs).
        name (str): the tensor's name, for error messages.
    """

    def __init__(self, meta: PartitionMeta, node_type: Optional[str], name: str) -> None:
        self.meta = meta
        self.node_type = meta.node_type(node_type)
        self.name = name

    def _served(self) -> Any:
        sampler = runtime.current().served.get("sampler") if runtime.is_initialized() else None
        if sampler is None or sampler.graph.meta.uid != self.meta.uid:
            raise RuntimeError(
                f"DistTensor '{self.name}' follows a partitioned graph (partition="
                f"PartitionMeta) and is indexed by original node ids; translating them needs "
                f"this process to serve its partition of that graph (init_rpc(ctx, "
                f"(feature_store, graph_store)) or a loader first), or pass relabelled=True "
                f"with internal ids (e.g. batch.part_n_id)")
        return sampler

    def relabelled(self, ids: Tensor, argument: str, run: Callable[[Any], Any]) -> Tensor:
        """Relabelled ids (= rows) of original node ids ``ids`` (checked in range).

        Raises:
            ValueError: naming ``argument``, for ids no partition owns (a damaged
                partition folder).
        """
        if ids.numel() == 0:
            return ids
        sampler = self._served()
        found = run(relabel(runtime.current(), sampler.ids, "node", self.node_type, ids))
        if bool((found < 0).any()):
            raise ValueError(f"DistTensor '{self.name}': {argument} holds original ids "
                             f"{ids[found < 0][:5].tolist()} of node type "
                             f"'{self.node_type}' that no partition owns")
        return found
