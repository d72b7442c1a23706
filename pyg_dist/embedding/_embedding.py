"""``DistEmbedding``: a learnable embedding table sharded like a :class:`DistTensor`."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.embedding._checkpoint import load_checkpoint, save_checkpoint
from pyg_dist.embedding._layout import PartitionLike
from pyg_dist.embedding._tensor import DistTensor, Index, InitFunc

PathLike = Union[str, os.PathLike]


@dataclass
class Lookup:
    """One recorded call: the rows looked up (internal ids) and the leaf handed out."""
    ids: Tensor
    rows: Tensor


class DistEmbedding:
    """A learnable embedding table whose rows live on their owner ranks.

    Calling it with ids gathers those rows (see :class:`DistTensor`) into a leaf
    tensor with ``requires_grad=True`` and records ``(ids, rows)`` while autograd is
    enabled. :class:`~pyg_dist.embedding.SparseAdagrad` or
    :class:`~pyg_dist.embedding.SparseAdam` later sends each row's gradient to its
    owner rank. It is not an ``nn.Module`` and has no dense parameters, so it stays
    outside ``DistributedDataParallel`` and dense optimizers.

    Creation is collective (every rank, same order). Under ``torch.no_grad()`` nothing
    is recorded.

    Args:
        num_embeddings (int): number of rows (e.g. nodes of one type).
        embedding_dim (int): size of each row.
        name (str, optional): name shared by every rank; an embedding created again
            with the same name refers to the same rows.
        init_func (callable, optional): ``init_func(shard_shape, dtype)`` returns the
            initial rows of each rank's shard. (default: zeros)
        partition (RangeBook or PartitionMeta or Sequence[int], optional): the node
            partition book the rows follow; ``None`` splits rows evenly over ranks.
        node_type (str, optional): node type, with the meta of a heterogeneous graph.
        dtype (torch.dtype): element type. (default: ``torch.float32``)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, name: Optional[str] = None,
                 init_func: Optional[InitFunc] = None, partition: PartitionLike = None,
                 node_type: Optional[str] = None, dtype: torch.dtype = torch.float32) -> None:
        if int(num_embeddings) < 0 or int(embedding_dim) < 1:
            raise ValueError(f"DistEmbedding needs num_embeddings >= 0 and embedding_dim >= 1, "
                             f"got {num_embeddings} and {embedding_dim}")
        if not dtype.is_floating_point:
            raise TypeError(f"a learnable DistEmbedding needs a floating point dtype, "
                            f"got {dtype}")
        self.weight = DistTensor((int(num_embeddings), int(embedding_dim)), dtype, name=name,
                                 init_func=init_func, partition=partition, node_type=node_type)
        self._trace: List[Lookup] = []
        self._consumed = 0  # leading entries of the trace already used by a step

    @property
    def name(self) -> str:
        return self.weight.name

    @property
    def num_embeddings(self) -> int:
        return self.weight.shape[0]

    @property
    def embedding_dim(self) -> int:
        return self.weight.shape[1]

    def __call__(self, ids: Index, device: Optional[torch.device] = None,
                 relabelled: bool = False) -> Tensor:
        """Rows of ``ids`` (any integer tensor shape): the dataset's original node ids
        when the table follows a partitioned graph (``partition=`` a
        :class:`~pyg_dist.format._meta.PartitionMeta`, see :class:`DistTensor`), else
        row ids. ``emb(batch.n_id)`` is served from the batch's own translation and
        the rows of this rank's partition are local.

        Args:
            ids: the rows to look up.
            device (torch.device, optional): where to put the result (the gradient
                still flows back to the recorded CPU leaf).
            relabelled (bool): ``ids`` are internal (relabelled) ids, e.g.
                ``batch.part_n_id``.

        Returns:
            a tensor of shape ``(*ids.shape, embedding_dim)``; while autograd is
            enabled it is built from a recorded leaf with ``requires_grad=True``.
        """
        flat, shape = self.weight.rows(ids, relabelled, "ids")
        rows = self.weight.read(flat, relabelled=True).view(*shape, self.embedding_dim)
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._trace.append(Lookup(flat, rows))
        return rows if device is None else rows.to(device, non_blocking=True)

    forward = __call__

    # ---- for the optimizers -------------------------------------------------------
    def gradients(self) -> Tuple[Tensor, Tensor]:
        """``(ids, grads)`` of every recorded lookup that received a gradient, with one
        row per id occurrence (duplicates not yet combined)."""
        ids, grads = [], []
        for entry in self._trace:
            if entry.rows.grad is not None:
                ids.append(entry.ids)
                grads.append(entry.rows.grad.reshape(-1, self.embedding_dim))
        if not ids:
            return (torch.empty(0, dtype=torch.long),
                    torch.empty((0, self.embedding_dim), dtype=self.weight.dtype))
        return torch.cat(ids), torch.cat(grads).to(self.weight.dtype)

    def mark_stepped(self) -> None:
        """The recorded lookups were used by an optimizer step."""
        self._consumed = len(self._trace)

    def zero_grad(self) -> None:
        """Clears the gradients of recorded lookups and forgets those an optimizer step
        already used (lookups recorded since the last step are kept, so calling
        ``zero_grad()`` between forward and backward is fine, as with torch)."""
        for entry in self._trace:
            entry.rows.grad = None
        del self._trace[:self._consumed]
        self._consumed = 0

    def reset_trace(self) -> None:
        """Forgets every recorded lookup."""
        self._trace.clear()
        self._consumed = 0

    # ---- checkpoints ---------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """The Stateful form :mod:`pyg_dist.checkpoint` saves: the table's name and its
        rows (a sharded tensor, saved by global row and resharded on load)."""
        return {"name": self.name, "weight": self.weight}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Checks ``state_dict`` as :mod:`pyg_dist.checkpoint` fills it (the rows are
        copied into this table's own ``weight`` in place).

        Raises:
            ValueError: for the state of another table, or rows that are not this table's.
        """
        if not isinstance(state_dict, dict) or set(state_dict) != {"name", "weight"}:
            raise ValueError("DistEmbedding.load_state_dict: expected name and weight")
        if state_dict["name"] != self.name:
            raise ValueError(f"DistEmbedding '{self.name}' cannot load the state of table "
                             f"{state_dict['name']!r}")
        if state_dict["weight"] is not self.weight:
            raise ValueError("DistEmbedding.load_state_dict: weight must be this table's own "
                             "DistTensor, filled in place (load with pyg_dist.checkpoint)")

    def save(self, path: PathLike) -> None:
        """Saves the table by global id, atomically, into the checkpoint folder
        ``path`` (collective; ``path`` must be visible to every rank). To save its
        optimizer state with it in one checkpoint, use
        :func:`pyg_dist.embedding.save_checkpoint` or :func:`pyg_dist.checkpoint.save`."""
        save_checkpoint(path, embeddings=[self])

    def load(self, path: PathLike) -> None:
        """Reads this table (matched by name) from a checkpoint, on any number of ranks
        (collective)."""
        load_checkpoint(path, embeddings=[self])

    def __repr__(self) -> str:
        return (f"DistEmbedding({self.num_embeddings}, {self.embedding_dim}, "
                f"name={self.name!r})")
