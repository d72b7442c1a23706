"""The rows this process owns of every distributed tensor, found by name.

Peers read and write them through the RPC callees ``embedding.read`` and
``embedding.write`` (registered by name when :mod:`pyg_dist.embedding` is
imported). Named tensors are unique per RPC group: creating a tensor with a name
that already exists returns the same rows. Shards stay registered for the life of
the RPC group, because a peer may read them at any time.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.embedding._comm import STANDALONE
from pyg_dist.embedding._layout import ShardLayout
from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._registry import callee


@dataclass
class Shard:
    """One rank's rows of a distributed tensor.

    Args:
        name (str): the tensor's name (same on every rank).
        shape (torch.Size): the global shape.
        dtype (torch.dtype): element type.
        layout (ShardLayout): which rank owns which rows.
        data (Tensor): this rank's rows ``[layout.start, layout.stop)``.
        after_read (callable, optional): called with :attr:`data` after every read,
            under the lock (e.g. to drop the pages of a mapped file read for a peer).
    """
    name: str
    shape: torch.Size
    dtype: torch.dtype
    layout: ShardLayout
    data: Tensor
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    after_read: Optional[Callable[[Tensor], None]] = field(default=None, repr=False)

    def local_rows(self, ids: Tensor) -> Tensor:
        """Positions in :attr:`data` of global ``ids`` this rank owns.

        Raises:
            ValueError: if some id is owned by another rank.
        """
        rows = ids - self.layout.start
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= self.data.shape[0]):
            raise ValueError(f"rank {self.layout.rank} owns rows [{self.layout.start}, "
                             f"{self.layout.stop}) of '{self.name}', but was asked for "
                             f"rows outside that range")
        return rows

    def read(self, ids: Tensor) -> Tensor:
        """Rows for global ``ids`` owned by this rank (a copy)."""
        rows = self.local_rows(ids)
        with self.lock:
            out = self.data.index_select(0, rows)
            if self.after_read is not None:
                self.after_read(self.data)
            return out

    def write(self, ids: Tensor, values: Tensor) -> None:
        """Overwrites rows for global ``ids`` owned by this rank."""
        rows = self.local_rows(ids)
        with self.lock:
            self.data[rows] = values

    def spec(self) -> Tuple[Tuple[int, ...], str, Tuple[int, ...]]:
        return tuple(self.shape), str(self.dtype), self.layout.offsets


_SHARDS: Dict[Tuple[str, str], Shard] = {}
_LOCK = threading.Lock()


def register(namespace: str, shard: Shard) -> Shard:
    """Registers ``shard``, or returns the shard already registered under its name.

    Shards of other (finished) RPC groups are dropped.

    Raises:
        ValueError: if the existing tensor of that name has another shape, dtype or
            layout.
    """
    with _LOCK:
        for key in [k for k in _SHARDS if k[0] != namespace]:
            del _SHARDS[key]
        existing = _SHARDS.get((namespace, shard.name))
        if existing is None:
            _SHARDS[(namespace, shard.name)] = shard
            return shard
    if existing.spec() != shard.spec():
        raise ValueError(f"a distributed tensor named '{shard.name}' already exists with shape "
                         f"{tuple(existing.shape)}, dtype {existing.dtype} and row offsets "
                         f"{list(existing.layout.offsets)}; cannot recreate it with shape "
                         f"{tuple(shard.shape)}, dtype {shard.dtype} and row offsets "
                         f"{list(shard.layout.offsets)}")
    return existing


def exists(namespace: str, name: str) -> bool:
    with _LOCK:
        return (namespace, name) in _SHARDS


def lookup(name: str, namespace: Optional[str] = None) -> Shard:
    """The shard of tensor ``name`` (in the current RPC group by default)."""
    if namespace is None:
        namespace = runtime.current().name if runtime.is_initialized() else STANDALONE
    with _LOCK:
        shard = _SHARDS.get((namespace, name))
    if shard is None:
        raise KeyError(f"no distributed tensor named '{name}' on this rank")
    return shard


@callee("embedding.read")
def _read(name: str, ids: Tensor) -> Tensor:
    return lookup(name).read(ids)


@callee("embedding.write")
def _write(name: str, ids: Tensor, values: Tensor) -> None:
    lookup(name).write(ids, values)
