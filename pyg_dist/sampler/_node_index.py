"""``NodeIndex``: an insertion-ordered hash map from node keys to local positions.

Used to dedupe and relabel sampled nodes. Open addressing with linear probing over
one numpy array holding ``(key, position)`` pairs side by side (a probe touches one
cache line), Fibonacci hashing, driven by numba kernels; its size is O(nodes
sampled), never O(nodes of the graph). Keys are non-negative int64 (global ids, or
``subtree << 40 | id`` in disjoint mode).

When the keys are known to lie below a bound (``key_bound``: a node type's global ids)
and an array of that many positions is no larger than the hash table the expected
keys need, the index is that array instead (*direct*: ``table[key]`` is the key's
position, ``-1`` if absent): one read per key, no hashing and no probing, in at most
the memory the hash table would take (so still O(nodes sampled)). A batch that samples
a good part of a partition's graph (every batch of a small graph, a products-scale
batch's 600k of 2.4M nodes) gets it.
"""
from __future__ import annotations

from typing import Optional, Tuple

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
def _insert_direct(table, order, size, keys, out, start):
    """:func:`_insert` into a direct table (keys checked to lie in it)."""
    n = keys.shape[0]
    for i in range(start, min(start + PREFETCH_AHEAD, n)):
        prefetch(table, keys[i])
    for i in range(start, n):
        if i + PREFETCH_AHEAD < n:
            prefetch(table, keys[i + PREFETCH_AHEAD])
        key = keys[i]
        p = table[key]
        if p < 0:
            p = size
            table[key] = size
            order[size] = key
            size += 1
        out[i] = p
    return size, n


@numba.njit(**_JIT)
def _insert(table, shift, order, size, limit, new_keys, out, start):
    """Inserts ``new_keys[start:]`` until the table holds ``limit`` keys; returns the new
    size and the position of the first key not handled (``(-1, 0)`` if a key is
    negative, ``(-2, 0)`` if one is outside a direct table (``shift == 0``), with
    nothing inserted). ``out`` receives each key's position."""
    n = new_keys.shape[0]
    for i in range(start, n):
        if new_keys[i] < 0:
            return -1, 0
        if shift == 0 and new_keys[i] >= table.shape[0]:
            return -2, 0
    if shift == 0:
        return _insert_direct(table, order, size, new_keys, out, start)
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
    if shift == 0:  # direct
        for i in range(n):
            key = keys[i]
            out[i] = table[key] if 0 <= key < table.shape[0] else -1
        return
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


def _hash_words(capacity: int) -> Tuple[int, int]:
    """``(bits, words)`` of the hash table for ``capacity`` keys (at most half full)."""
    bits = max(int(2 * capacity - 1).bit_length(), 4)
    return bits, 2 << bits


def direct_for(capacity: int, key_bound: Optional[int]) -> bool:
    """Whether an index for ``capacity`` keys below ``key_bound`` is a direct table (no
    larger than the hash table for ``capacity`` keys)."""
    return key_bound is not None and 0 <= key_bound <= _hash_words(capacity)[1]


class NodeIndex:
    """Maps keys to positions ``0, 1, 2, ...`` in order of first appearance.

    The hash table is sized by the keys actually inserted (at most half full; it
    doubles when needed), not by the keys offered: a hop offers every drawn neighbour,
    most of them seen before. :meth:`clear` empties it for the next batch without
    giving its memory back (:class:`NodeIndexPool` keeps cleared ones).

    Args:
        capacity_hint (int): expected number of keys (the table grows as needed).
        key_bound (int, optional): every key lies below it (:meth:`insert` refuses the
            others); a direct table when :func:`direct_for` says so.
    """

    def __init__(self, capacity_hint: int = 1024, key_bound: Optional[int] = None) -> None:
        self._size = 0
        self._order = np.empty(0, dtype=np.int64)
        capacity = max(int(capacity_hint), 16)
        self.key_bound = int(key_bound) if direct_for(capacity, key_bound) else None
        if self.key_bound is not None:  # direct: shift 0 tells the kernels
            self._shift, self._limit = 0, self.key_bound
            self._table = full_large(max(self.key_bound, 1), _EMPTY)
        else:
            self._alloc(capacity)

    @property
    def capacity(self) -> int:
        """Keys the table holds before it grows."""
        return self._limit

    def _alloc(self, capacity: int) -> None:
        """A table for ``capacity`` keys (at most half full), the keys so far put back."""
        bits, words = _hash_words(capacity)
        self._shift, self._limit = 64 - bits, 1 << (bits - 1)
        self._table = full_large(words, _EMPTY)
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

    def insert(self, keys: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """Adds the keys not seen yet; returns every key's position, written into
        ``out`` when given (a contiguous 1-D int64 tensor of one value per key, e.g. a
        row of the batch's final edge tensor: no array of positions to copy later)."""
        new = _as_keys(keys)
        result = out
        if out is None:
            result = torch.from_numpy(np.empty(new.shape[0], dtype=np.int64))
        elif not (isinstance(out, Tensor) and out.dtype == torch.int64 and out.dim() == 1
                  and out.numel() == new.shape[0] and out.is_contiguous()
                  and out.device.type == "cpu"):
            raise ValueError(f"NodeIndex.insert: out must be a contiguous 1-D int64 CPU "
                             f"tensor of {new.shape[0]} values, got "
                             f"{tuple(out.shape) if isinstance(out, Tensor) else type(out)}"
                             f" {getattr(out, 'dtype', '')}")
        out = result.numpy()
        self._reserve(min(self._size + new.shape[0], self._limit))
        done = 0
        while True:
            size, done = _insert(self._table, self._shift, self._order, self._size,
                                 self._limit, new, out, done)
            if size == -1:
                raise ValueError("NodeIndex keys must be non-negative")
            if size < 0:
                raise ValueError(f"NodeIndex keys must lie below {self.key_bound}, got "
                                 f"{int(new.max())}")
            self._size = size
            if done == new.shape[0]:
                return result
            self._alloc(2 * self._limit)

    def clear(self) -> None:
        """Forgets every key; the table keeps its size for the next keys."""
        if self._size:
            if self._shift == 0 and 16 * self._size < self._table.shape[0]:
                self._table[self._order[:self._size]] = _EMPTY  # a few keys of a large table
            else:
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
        self.peak = 0  # the most keys an index given back held

    def take(self, capacity_hint: int, key_bound: Optional[int] = None) -> NodeIndex:
        """An empty index (a kept one of the same kind when there is one), for at least
        as many keys as the fullest given back so far."""
        capacity = max(int(capacity_hint), self.peak)
        bound = key_bound if direct_for(max(capacity, 16), key_bound) else None
        for i in range(len(self._free) - 1, -1, -1):
            if self._free[i].key_bound == bound:
                return self._free.pop(i)
        return NodeIndex(capacity, bound)

    def give(self, index: NodeIndex) -> None:
        """Takes ``index`` back (cleared); it must not be used afterwards."""
        self.peak = max(self.peak, len(index))
        if len(self._free) < self.keep:
            index.clear()
            self._free.append(index)
