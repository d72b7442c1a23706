"""State trees of ``stateful`` entries, and their sharded tensors saved by global row.

A ``stateful`` entry's ``state_dict()`` is a tree of dicts, lists and tuples over tensors,
JSON values and *sharded tensors* (:class:`Sharded`, e.g. a ``DistTensor``: each rank
holds the rows ``local_range`` of one global tensor). :func:`split` replaces every sharded
tensor by a marker ``{MARK: i}``; the rest goes into the rank's own state file. Every rank
writes its rows of sharded tensor ``i`` of entry ``e`` into ``shards/e_i_r<rank>.pt``
(``{"start", "stop", "rows"}``), and ``info.json`` records each tensor's global shape,
dtype and which file holds which rows (:class:`TensorEntry`). On load every rank reads the
saved rows that overlap its own ``local_range``, so a table saved by ``k`` ranks loads on
``k'`` ranks with any row split.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Protocol, Tuple, runtime_checkable

import torch
from torch import Tensor

from pyg_dist.checkpoint._errors import CheckpointError
from pyg_dist.format import _files as fs

MARK = "pyg_dist.checkpoint._sharded"
_FILE = re.compile(r"shards/\d+_\d+_r\d+\.pt")


@runtime_checkable
class Sharded(Protocol):
    """A tensor whose rows are split over the ranks (``DistTensor`` is one)."""

    @property
    def shape(self) -> torch.Size: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def local_range(self) -> Tuple[int, int]: ...

    @property
    def local_data(self) -> Tensor: ...

    @property
    def lock(self) -> Any: ...


def split(tree: Any, where: str) -> Tuple[Any, List[Sharded]]:
    """``tree`` with every :class:`Sharded` replaced by ``{MARK: i}``, and the sharded
    tensors in order.

    Raises:
        TypeError: naming ``where`` and the path of a value that is not a tensor, sharded
            tensor, container or JSON value (it could not be loaded without unpickling).
    """
    found: List[Sharded] = []

    def walk(value: Any, at: str) -> Any:
        if isinstance(value, Sharded) and not isinstance(value, Tensor):
            found.append(value)
            return {MARK: len(found) - 1}
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, (str, int)) or isinstance(key, bool):
                    raise TypeError(f"{where}: key {key!r} at {at or 'the top'} must be a "
                                    f"str or int")
            return {k: walk(v, f"{at}[{k!r}]") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v, f"{at}[{i}]") for i, v in enumerate(value))
        if value is None or isinstance(value, (bool, int, float, str, Tensor)):
            return value
        raise TypeError(f"{where}: the value at {at or 'the top'} is a {type(value).__name__}"
                        f"; a checkpoint holds tensors, containers and JSON values only")
    return walk(tree, ""), found


def fill(tree: Any, live: List[Sharded], where: str) -> Any:
    """The saved ``tree`` with its markers replaced by the ``live`` sharded tensors."""
    def walk(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {MARK}:
            i = value[MARK]
            if type(i) is not int or not 0 <= i < len(live):
                raise CheckpointError(f"{where}: sharded tensor {i!r} is not one of the "
                                      f"{len(live)} it holds")
            return live[i]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v) for v in value)
        return value
    return walk(tree)


def shard_file(entry: int, tensor: int, rank: int) -> str:
    return f"shards/{entry}_{tensor}_r{rank}.pt"


@dataclass(frozen=True)
class TensorEntry:
    """A saved sharded tensor: global shape, dtype and ``(file, start, stop)`` pieces
    covering rows ``[0, shape[0])`` in order."""
    shape: Tuple[int, ...]
    dtype: torch.dtype
    shards: Tuple[Tuple[str, int, int], ...]

    def to_json(self) -> Dict[str, Any]:
        return {"shape": list(self.shape), "dtype": str(self.dtype).split(".")[-1],
                "shards": [list(s) for s in self.shards]}

    @classmethod
    def from_json(cls, raw: Any, where: str) -> "TensorEntry":
        """Parses and checks ``raw``; raises :class:`CheckpointError` naming ``where``."""
        if not isinstance(raw, dict) or set(raw) != {"shape", "dtype", "shards"}:
            raise CheckpointError(f"{where}: expected shape, dtype and shards")
        shape, name, shards = raw["shape"], raw["dtype"], raw["shards"]
        if not isinstance(shape, list) or not shape or not all(
                type(s) is int and s >= 0 for s in shape):
            raise CheckpointError(f"{where}: shape must be a list of sizes >= 0, got {shape!r}")
        dtype = getattr(torch, name, None) if isinstance(name, str) else None
        if not isinstance(dtype, torch.dtype):
            raise CheckpointError(f"{where}: dtype {name!r} is not a torch dtype")
        if not isinstance(shards, list):
            raise CheckpointError(f"{where}: shards must be a list")
        stop = 0
        for i, item in enumerate(shards):
            ok = isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) \
                and all(type(v) is int for v in item[1:])
            if not ok or not _FILE.fullmatch(item[0]) or item[1] != stop or item[2] < item[1]:
                raise CheckpointError(f"{where}: shards[{i}] must be [file inside shards/, "
                                      f"start {stop}, stop >= start], got {item!r}")
            stop = item[2]
        if stop != shape[0]:
            raise CheckpointError(f"{where}: the shards cover rows [0, {stop}) of {shape[0]}")
        return cls(tuple(shape), dtype, tuple(tuple(s) for s in shards))


def write_rows(folder: Path, entry: int, tensors: List[Sharded], rank: int) -> List[List[int]]:
    """Writes this rank's rows of every tensor into ``folder``; returns their ranges."""
    ranges = []
    for i, tensor in enumerate(tensors):
        start, stop = tensor.local_range
        file = folder / shard_file(entry, i, rank)
        file.parent.mkdir(exist_ok=True)
        with tensor.lock:
            obj = {"start": start, "stop": stop, "rows": tensor.local_data}
            fs.atomic_write(file, lambda f, obj=obj: torch.save(obj, f))
        ranges.append([start, stop])
    return ranges


def describe(tensor: Any) -> str:
    return f"shape {tuple(tensor.shape)} and dtype {str(tensor.dtype).split('.')[-1]}"


def plan_rows(folder: Path, saved: TensorEntry, tensor: Sharded,
              where: str) -> List[Tuple[Tensor, int]]:
    """The saved rows (checked) that ``tensor``'s shard holds, as ``(rows, first row)``."""
    if tuple(saved.shape) != tuple(tensor.shape) or saved.dtype != tensor.dtype:
        raise CheckpointError(f"{where} was saved with {describe(saved)}, but is loaded into "
                              f"one with {describe(tensor)}")
    lo, hi = tensor.local_range
    pieces = []
    for name, start, stop in saved.shards:
        a, b = max(lo, start), min(hi, stop)
        if a < b:
            rows = read_shard(folder / name, start, stop, saved)
            pieces.append((rows[a - start:b - start], a))
    return pieces


def copy_rows(tensor: Sharded, pieces: List[Tuple[Tensor, int]]) -> None:
    lo = tensor.local_range[0]
    with tensor.lock:
        for rows, start in pieces:
            tensor.local_data[start - lo:start - lo + rows.shape[0]] = rows


def read_shard(file: Path, start: int, stop: int, entry: TensorEntry) -> Tensor:
    """The rows in ``file`` (mapped, ``weights_only=True``), checked against ``entry``.

    Raises:
        CheckpointError: naming ``file`` when it is not a regular file, cannot be loaded
            safely or does not hold rows ``[start, stop)`` of ``entry``.
    """
    try:
        fs.regular_file(file)
        obj: Any = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except fs.PointerError as exc:
        raise CheckpointError(str(exc)) from None
    except Exception as exc:  # any failure to unpickle: truncated, unsafe, not torch's
        raise CheckpointError(f"{file}: cannot be loaded with weights_only=True "
                              f"({type(exc).__name__})") from None
    if not isinstance(obj, dict) or set(obj) != {"start", "stop", "rows"}:
        raise CheckpointError(f"{file}: expected a dict with keys start, stop and rows")
    rows = obj["rows"]
    if (type(obj["start"]), type(obj["stop"])) != (int, int) \
            or (obj["start"], obj["stop"]) != (start, stop):
        raise CheckpointError(f"{file}: holds rows [{obj['start']!r}, {obj['stop']!r}), "
                              f"info.json says [{start}, {stop})")
    expected = (stop - start, *entry.shape[1:])
    if not isinstance(rows, Tensor) or rows.dtype != entry.dtype \
            or tuple(rows.shape) != expected:
        raise CheckpointError(f"{file}: expected {entry.dtype} rows of shape {expected}")
    return rows
