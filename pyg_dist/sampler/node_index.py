"""``NodeIndex``: an insertion-ordered hash map from node keys to local positions.

Used to dedupe and relabel sampled nodes. Open addressing with linear probing over
one numpy array holding ``(key, position)`` pairs side by side (a probe touches one
cache line), Fibonacci hashing, driven by numba kernels; its size is O(nodes
sampled), never O(nodes of the graph). Keys are non-negative int64 (global ids, or
``subtree << 40 | id`` in disjoint mode).
"""
from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

from pyg_dist.madvise import full_large
from pyg_dist.sampler.kernels import PREFETCH_AHEAD, prefetch

_EMPTY = -1
_JIT = dict(cache=True, nogil=True)
_GOLDEN = 0x9E3779B97F4A7C15


@numba.njit(**_JIT)
def _slot(key: int, shift: int) -> int:
    """Fibonacci hashing: the top bits of ``key * 2^64 / phi``."""
    return np.int64((np.uint64(key) * np.uint64(_GOLDEN)) >> np.uint64(shift))


@numba.njit(**_JIT)
def _insert(table, shift, order, size, new_keys, out):
    """Inserts ``new_keys``; returns the new size (``-1`` if a key is negative, with
    nothing inserted). ``out`` receives each key's position."""
    n = new_keys.shape[0]
    for i in range(n):
        if new_keys[i] < 0:
            return -1
    mask = (table.shape[0] >> 1) - 1
    for i in range(min(PREFETCH_AHEAD, n)):
        prefetch(table, 2 * _slot(new_keys[i], shift))
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch(table, 2 * _slot(new_keys[i + PREFETCH_AHEAD], shift))
        key = new_keys[i]
        s = _slot(key, shift)
        while True:
            k = table[2 * s]
            if k == key:
                out[i] = table[2 * s + 1]
                break
            if k == _EMPTY:
                table[2 * s] = key
                table[2 * s + 1] = size
                order[size] = key
                out[i] = size
                size += 1
                break
            s = (s + 1) & mask
    return size


@numba.njit(**_JIT)
def _lookup(table, shift, keys, out):
    mask = (table.shape[0] >> 1) - 1
    n = keys.shape[0]
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch(table, 2 * _slot(keys[i + PREFETCH_AHEAD], shift))
        key = keys[i]
        s = _slot(key, shift)
        out[i] = -1
        while table[2 * s] != _EMPTY:
            if table[2 * s] == key:
                out[i] = table[2 * s + 1]
                break
            s = (s + 1) & mask


_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _as_keys(keys: Tensor) -> np.ndarray:
    """Keys as a contiguous int64 array (the one type the kernels are compiled for).

    Any int64 key is safe in the kernels: a probe stays inside the table whatever the
    key, so :meth:`NodeIndex.lookup` needs no range check; :meth:`NodeIndex.insert`
    refuses negative keys (``-1`` marks an empty slot).
    """
    keys = torch.as_tensor(keys)
    if keys.dtype not in _INT_DTYPES:
        raise TypeError(f"NodeIndex keys must be an integer tensor, got {keys.dtype}")
    if keys.dim() != 1:
        raise ValueError(f"NodeIndex keys must be 1-D, got shape {tuple(keys.shape)}")
    return keys.detach().contiguous().numpy().astype(np.int64, copy=False)


class NodeIndex:
    """Maps keys to positions ``0, 1, 2, ...`` in order of first appearance.

    Args:
        capacity_hint (int): expected number of keys (the table grows as needed).
    """

    def __init__(self, capacity_hint: int = 1024) -> None:
        self._size = 0
        self._order = np.empty(0, dtype=np.int64)
        self._alloc(max(int(capacity_hint), 16))

    def _alloc(self, capacity: int) -> None:
        bits = max(int(2 * capacity - 1).bit_length(), 4)  # load factor <= 0.5
        self._shift = 64 - bits
        self._table = full_large(2 << bits, _EMPTY)
        order = np.empty(capacity, dtype=np.int64)
        if self._size:
            order[:self._size] = self._order[:self._size]
            _insert(self._table, self._shift, np.empty(self._size, np.int64), 0,
                    order[:self._size], np.empty(self._size, np.int64))
        self._order = order

    def insert(self, keys: Tensor) -> Tensor:
        """Adds the keys not seen yet; returns every key's position."""
        new = _as_keys(keys)
        if self._size + new.shape[0] > self._order.shape[0]:
            self._alloc(max(2 * self._order.shape[0], self._size + new.shape[0]))
        out = np.empty(new.shape[0], dtype=np.int64)
        size = _insert(self._table, self._shift, self._order, self._size, new, out)
        if size < 0:
            raise ValueError("NodeIndex keys must be non-negative")
        self._size = size
        return torch.from_numpy(out)

    def lookup(self, keys: Tensor) -> Tensor:
        """Positions of ``keys`` (``-1`` for keys never inserted)."""
        q = _as_keys(keys)
        out = np.empty(q.shape[0], dtype=np.int64)
        _lookup(self._table, self._shift, q, out)
        return torch.from_numpy(out)

    @property
    def keys(self) -> Tensor:
        """Every key inserted, in order of first appearance."""
        return self.keys_since(0)

    def keys_since(self, start: int) -> Tensor:
        """The keys inserted after the first ``start`` ones (a copy)."""
        return torch.from_numpy(self._order[start:self._size].copy())

    def __len__(self) -> int:
        return self._size
