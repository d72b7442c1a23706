"""The manifest of a checkpoint (``manifest.json``): what it holds, as dataclasses.

Version 2 (written now) describes several objects saved together::

    {"format": "pyg_dist.embedding", "version": 2, "world_size": 2,
     "embeddings": [{"kind": "DistEmbedding", "name": "paper_emb", "config": {...},
                     "tensors": {"weight": TENSOR}}],
     "optimizers": [{"kind": "SparseAdam", "name": null,
                     "config": {"lr": ..., "params": ["paper_emb"]},
                     "tensors": {"paper_emb/m": TENSOR, ...}}]}

    TENSOR = {"shape": [rows, ...], "dtype": "float32",
              "shards": [{"file": "t0_r0.pt", "start": 0, "stop": 9,
                          "digest": "blake2b-128:..."}, ...]}

A shard's ``digest`` (:mod:`pyg_dist.format.digest`, recorded at save time) is
checked before the shard is loaded; manifests written before digests existed have none
and still load.

Version 1 (the first release) held one object: ``kind``, ``config`` and
``tensors`` at the top level; it is read as version 2 with one entry (an embedding
without a name, or an optimizer). Everything is validated when read, and errors
name the file and the field.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

FORMAT = "pyg_dist.embedding"
VERSION = 2
EMBEDDING_KIND = "DistEmbedding"


class CheckpointError(ValueError):
    """A checkpoint is incomplete, damaged, of another kind, or does not fit the
    objects it is loaded into."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).split(".")[-1]


@dataclass(frozen=True)
class ShardEntry:
    """One file holding the global rows ``[start, stop)`` of a tensor, and the digest of
    its bytes (``None`` in checkpoints saved before digests were recorded)."""
    file: str
    start: int
    stop: int
    digest: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"file": self.file, "start": self.start, "stop": self.stop}
        if self.digest is not None:
            out["digest"] = self.digest
        return out


@dataclass(frozen=True)
class TensorEntry:
    """A saved tensor: its global shape, element type and the files holding its rows."""
    shape: Tuple[int, ...]
    dtype: torch.dtype
    shards: Tuple[ShardEntry, ...]

    def to_json(self) -> Dict[str, Any]:
        return {"shape": list(self.shape), "dtype": dtype_name(self.dtype),
                "shards": [s.to_json() for s in self.shards]}


@dataclass(frozen=True)
class PartEntry:
    """One saved object: a table (``name`` is its name; ``None`` in version 1) or an
    optimizer (``config["params"]`` names its tables)."""
    kind: str
    name: Optional[str]
    config: Dict[str, Any]
    tensors: Dict[str, TensorEntry]

    def to_json(self) -> Dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "config": self.config,
                "tensors": {k: t.to_json() for k, t in self.tensors.items()}}


@dataclass(frozen=True)
class Manifest:
    """Everything a checkpoint holds."""
    world_size: int
    embeddings: Tuple[PartEntry, ...]
    optimizers: Tuple[PartEntry, ...]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION,
                           "world_size": self.world_size,
                           "embeddings": [e.to_json() for e in self.embeddings],
                           "optimizers": [o.to_json() for o in self.optimizers]},
                          indent=1) + "\n"

    def describe(self) -> str:
        """What it holds, for error messages."""
        tables = [e.name or "(one unnamed table)" for e in self.embeddings]
        opts = [f"{o.kind} of {o.config.get('params')}" for o in self.optimizers]
        return f"tables {tables}, optimizer state {opts or 'none'}"


def read_manifest(file: Path) -> Manifest:
    """Reads and validates ``file``.

    Raises:
        CheckpointError: naming ``file`` and the field, if it cannot be read or parsed,
            or does not have the expected structure.
    """
    try:
        raw = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{file}: cannot be read as JSON ({exc})") from exc
    try:
        return _parse(raw)
    except _Invalid as exc:
        raise CheckpointError(f"{file}: {exc}") from None


class _Invalid(Exception):
    """A field of the manifest does not have the expected type or value."""


def _get(obj: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise _Invalid(f"{where} has no field '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Invalid(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    return value


def _parse(raw: Any) -> Manifest:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise _Invalid(f"not a {FORMAT} manifest")
    version = _get(raw, "version", int, "manifest")
    world_size = _get(raw, "world_size", int, "manifest")
    if version == 1:  # one object, at the top level
        part = _parse_part({**raw, "name": None}, "manifest")
        if part.kind == EMBEDDING_KIND:
            return Manifest(world_size, (part,), ())
        return Manifest(world_size, (), (part,))
    if version != VERSION:
        raise _Invalid(f"version {version} is not one this release reads (1, {VERSION})")
    parts = {}
    for role in ("embeddings", "optimizers"):
        items = _get(raw, role, list, "manifest")
        parts[role] = tuple(_parse_part(item, f"{role}[{i}]") for i, item in enumerate(items))
    for entry in parts["embeddings"]:
        if entry.name is None:
            raise _Invalid(f"a table of kind {entry.kind} has no name")
    return Manifest(world_size, parts["embeddings"], parts["optimizers"])


def _parse_part(raw: Any, where: str) -> PartEntry:
    kind = _get(raw, "kind", str, where)
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise _Invalid(f"{where}.name must be a string, got {name!r}")
    config = _get(raw, "config", dict, where)
    tensors = _get(raw, "tensors", dict, where)
    return PartEntry(kind, name, config,
                     {str(k): _parse_tensor(v, f"{where}.tensors[{k!r}]")
                      for k, v in tensors.items()})


def _parse_tensor(raw: Any, where: str) -> TensorEntry:
    shape = _get(raw, "shape", list, where)
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                            for s in shape):
        raise _Invalid(f"{where}.shape must be a list of sizes >= 0, got {shape!r}")
    name = _get(raw, "dtype", str, where)
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise _Invalid(f"{where}.dtype {name!r} is not a torch dtype")
    shards = []
    for i, item in enumerate(_get(raw, "shards", list, where)):
        at = f"{where}.shards[{i}]"
        file = _get(item, "file", str, at)
        if Path(file).name != file or file in ("", ".", ".."):
            raise _Invalid(f"{at}.file must be a file name inside the checkpoint, got {file!r}")
        digest = item.get("digest")
        if digest is not None and not isinstance(digest, str):
            raise _Invalid(f"{at}.digest must be a string, got {digest!r}")
        shards.append(ShardEntry(file, _get(item, "start", int, at), _get(item, "stop", int, at),
                                 digest))
    _check_tiling(shards, shape[0], where)
    return TensorEntry(tuple(shape), dtype, tuple(shards))


def _check_tiling(shards: List[ShardEntry], rows: int, where: str) -> None:
    """The shards cover the rows ``[0, rows)`` once, in order."""
    stop = 0
    for i, shard in enumerate(shards):
        if shard.start != stop or shard.stop < shard.start:
            raise _Invalid(f"{where}.shards[{i}] holds rows [{shard.start}, {shard.stop}), "
                           f"expected a range starting at row {stop}")
        stop = shard.stop
    if stop != rows:
        raise _Invalid(f"{where}: the shards cover rows [0, {stop}) of {rows}")
