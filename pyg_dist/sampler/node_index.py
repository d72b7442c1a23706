"""``NodeIndex``: an insertion-ordered hash map from node keys to local positions.

Used to dedupe and relabel sampled nodes. Open addressing with linear probing over
numpy arrays, driven by numba kernels; its size is O(nodes sampled), never
O(nodes of the graph). Keys are non-negative int64 (global ids, or
``subtree << 40 | id`` in disjoint mode).
"""
from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

_EMPTY = -1
_JIT = dict(cache=True, nogil=True)


@numba.njit(**_JIT)
def _slot(key: int, mask: int) -> int:
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64((h ^ (h >> np.uint64(29))) & np.uint64(mask))


@numba.njit(**_JIT)
def _insert(table_keys, table_vals, order, size, new_keys, out):
    """Inserts ``new_keys``; returns the new size. ``out`` receives each key's position."""
    mask = table_keys.shape[0] - 1
    for i in range(new_keys.shape[0]):
        key = new_keys[i]
        s = _slot(key, mask)
        while True:
            k = table_keys[s]
            if k == key:
                out[i] = table_vals[s]
                break
            if k == _EMPTY:
                table_keys[s] = key
                table_vals[s] = size
                order[size] = key
                out[i] = size
                size += 1
                break
            s = (s + 1) & mask
    return size


@numba.njit(**_JIT)
def _lookup(table_keys, table_vals, keys, out):
    mask = table_keys.shape[0] - 1
    for i in range(keys.shape[0]):
        key = keys[i]
        s = _slot(key, mask)
        out[i] = -1
        while table_keys[s] != _EMPTY:
            if table_keys[s] == key:
                out[i] = table_vals[s]
                break
            s = (s + 1) & mask


class NodeIndex:
    """Maps keys to positions ``0, 1, 2, ...`` in order of first appearance.

    Args:
        capacity_hint (int): expected number of keys (the table grows as needed).
    """

    def __init__(self, capacity_hint: int = 1024) -> None:
        self._size = 0
        self._alloc(max(int(capacity_hint), 16))

    def _alloc(self, capacity: int) -> None:
        slots = 1 << int(2 * capacity - 1).bit_length()  # load factor <= 0.5
        self._keys = np.full(slots, _EMPTY, dtype=np.int64)
        self._vals = np.empty(slots, dtype=np.int64)
        order = np.empty(capacity, dtype=np.int64)
        if self._size:
            order[:self._size] = self._order[:self._size]
            _insert(self._keys, self._vals, np.empty(self._size, np.int64), 0,
                    order[:self._size], np.empty(self._size, np.int64))
        self._order = order

    def insert(self, keys: Tensor) -> Tensor:
        """Adds the keys not seen yet; returns every key's position."""
        new = keys.detach().contiguous().numpy().astype(np.int64, copy=False)
        if new.size and int(new.min()) < 0:
            raise ValueError("NodeIndex keys must be non-negative")
        if self._size + new.shape[0] > self._order.shape[0]:
            self._alloc(max(2 * self._order.shape[0], self._size + new.shape[0]))
        out = np.empty(new.shape[0], dtype=np.int64)
        self._size = _insert(self._keys, self._vals, self._order, self._size, new, out)
        return torch.from_numpy(out)

    def lookup(self, keys: Tensor) -> Tensor:
        """Positions of ``keys`` (``-1`` for keys never inserted)."""
        q = keys.detach().contiguous().numpy().astype(np.int64, copy=False)
        out = np.empty(q.shape[0], dtype=np.int64)
        _lookup(self._keys, self._vals, q, out)
        return torch.from_numpy(out)

    @property
    def keys(self) -> Tensor:
        """Every key inserted, in order of first appearance."""
        return torch.from_numpy(self._order[:self._size].copy())

    def __len__(self) -> int:
        return self._size
