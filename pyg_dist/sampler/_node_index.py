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

from pyg_dist._madvise import full_large
from pyg_dist.sampler._sample_kernels import PREFETCH_AHEAD, prefetch

_EMPTY = -1
_JIT = dict(cache=True, nogil=True)
_GOLDEN = 0x9E3779B97F4A7C15


@numba.njit(**_JIT)
def _slot(key: int, shift: int) -> int:
    """Fibonacci hashing: the top bits of ``key * 2^64 / phi``."""
    return np.int64((np.uint64(key) * np.uint64(_GOLDEN)) >> np.uint64(shift))


@numba.njit(**_JIT)
def _insert(table, shift, order, size, limit, new_keys, out, start):
    """Inserts ``new_keys[start:]`` until the table holds ``limit`` keys; returns the new
    size and the position of the first key not handled (``(-1, 0)`` if a key is
    negative, with nothing inserted). ``out`` receives each key's position."""
    n = new_keys.shape[0]
    for i in range(start, n):
        if new_keys[i] < 0:
            return -1, 0
    mask = (table.shape[0] >> 1) - 1
    for i in range(start, min(start + PREFETCH_AHEAD, n)):
        prefetch(table, 2 * _slot(new_keys[i], shift))
    for i in range(start, n):
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
                if size == limit:  # full: the caller grows the table and goes on
                    return size, i
                table[2 * s] = key
                table[2 * s + 1] = size
                order[size] = key
                out[i] = size
                size += 1
                break
            s = (s + 1) & mask
    return size, n


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

    The hash table is sized by the keys actually inserted (at most half full; it
    doubles when needed), not by the keys offered: a hop offers every drawn neighbour,
    most of them seen before. :meth:`clear` empties it for the next batch without
    giving its memory back (:class:`NodeIndexPool` keeps cleared ones).

    Args:
        capacity_hint (int): expected number of keys (the table grows as needed).
    """

    def __init__(self, capacity_hint: int = 1024) -> None:
        self._size = 0
        self._order = np.empty(0, dtype=np.int64)
        self._alloc(max(int(capacity_hint), 16))

    @property
    def capacity(self) -> int:
        """Keys the table holds before it grows."""
        return self._limit

    def _alloc(self, capacity: int) -> None:
        """A table for ``capacity`` keys (at most half full), the keys so far put back."""
        bits = max(int(2 * capacity - 1).bit_length(), 4)
        self._shift, self._limit = 64 - bits, 1 << (bits - 1)
        self._table = full_large(2 << bits, _EMPTY)
        self._reserve(self._limit)
        if self._size:
            keys = self._order[:self._size].copy()
            _insert(self._table, self._shift, self._order, 0, self._limit, keys,
                    np.empty(self._size, np.int64), 0)

    def _reserve(self, n: int) -> None:
        """Room for ``n`` keys in the insertion order (the keys so far kept)."""
        if n > self._order.shape[0]:
            order = np.empty(max(n, 2 * self._order.shape[0]), dtype=np.int64)
            order[:self._size] = self._order[:self._size]
            self._order = order

    def insert(self, keys: Tensor) -> Tensor:
        """Adds the keys not seen yet; returns every key's position."""
        new = _as_keys(keys)
        out = np.empty(new.shape[0], dtype=np.int64)
        self._reserve(min(self._size + new.shape[0], self._limit))
        done = 0
        while True:
            size, done = _insert(self._table, self._shift, self._order, self._size,
                                 self._limit, new, out, done)
            if size < 0:
                raise ValueError("NodeIndex keys must be non-negative")
            self._size = size
            if done == new.shape[0]:
                return torch.from_numpy(out)
            self._alloc(2 * self._limit)

    def clear(self) -> None:
        """Forgets every key; the table keeps its size for the next keys."""
        if self._size:
            self._table.fill(_EMPTY)
            self._size = 0

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


class NodeIndexPool:
    """Cleared :class:`NodeIndex` es kept for the next batch: a batch takes one per node
    type and gives it back when its node lists are copied out, so tables and their
    pages are reused instead of allocated (and faulted in) per batch. Batches in
    flight at once take different ones.

    Args:
        keep (int): the most tables kept (the rest are dropped when given back).
    """

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._free: list = []

    def take(self, capacity_hint: int) -> NodeIndex:
        """An empty index (a kept one when there is one)."""
        try:
            return self._free.pop()
        except IndexError:
            return NodeIndex(capacity_hint)

    def give(self, index: NodeIndex) -> None:
        """Takes ``index`` back (cleared); it must not be used afterwards."""
        if len(self._free) < self.keep:
            index.clear()
            self._free.append(index)
