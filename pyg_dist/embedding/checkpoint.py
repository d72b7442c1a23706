"""Checkpoints of distributed tensors, stored by global row id.

A checkpoint is a folder, visible to every rank (a shared file system on several
machines)::

    PATH/t<i>_r<rank>.pt   rank's rows of tensor i: {"start", "stop", "rows"}
    PATH/manifest.json     kind, config (e.g. hyper-parameters), and for each tensor
                           its shape, dtype and which file holds which global rows
    PATH/DONE              written last: the checkpoint is complete

Every file goes to a temporary name first and is renamed into place; saving again
into the same folder first removes ``DONE``. Because shards are described by global
row ranges, a checkpoint loads on any number of ranks: each rank reads the parts of
the files that overlap its own rows. Files are read with ``weights_only=True``.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Union

import torch

from pyg_dist.embedding.tensor import DistTensor

FORMAT = "pyg_dist.embedding"
VERSION = 1
MANIFEST = "manifest.json"
DONE = "DONE"
PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete, of another kind, or does not fit the tensors."""


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _comm_of(tensors: Mapping[str, DistTensor]) -> Any:
    if not tensors:
        raise ValueError("a checkpoint needs at least one tensor")
    return next(iter(tensors.values())).comm


def save_tensors(path: PathLike, kind: str, tensors: Mapping[str, DistTensor],
                 config: Dict[str, Any]) -> None:
    """Writes ``tensors`` (same keys on every rank) into the folder ``path`` (collective).

    Args:
        path: the checkpoint folder (created if missing).
        kind: what is saved (checked on load), e.g. ``"DistEmbedding"``.
        tensors: the tensors by key.
        config: JSON-serialisable settings restored by :func:`load_tensors`.
    """
    comm = _comm_of(tensors)
    root = Path(path)
    error: Optional[Exception] = None
    if comm.rank == 0:
        try:
            root.mkdir(parents=True, exist_ok=True)
            (root / DONE).unlink(missing_ok=True)
        except OSError as exc:
            error = exc
    comm.agree(error, f"preparing checkpoint folder {root}")
    try:
        for i, tensor in enumerate(tensors.values()):
            start, stop = tensor.local_range
            with tensor.lock:
                obj = {"start": start, "stop": stop, "rows": tensor.local_data}
                _atomic_write(root / f"t{i}_r{comm.rank}.pt", lambda p: torch.save(obj, p))
    except (OSError, RuntimeError) as exc:
        error = exc
    comm.agree(error, f"writing checkpoint shards into {root}")
    if comm.rank == 0:
        try:
            manifest = _manifest(kind, tensors, config, comm.world_size)
            _atomic_write(root / MANIFEST,
                          lambda p: p.write_text(json.dumps(manifest, indent=1) + "\n"))
            _atomic_write(root / DONE, lambda p: p.write_text("complete\n"))
        except (OSError, TypeError, ValueError) as exc:
            error = exc
    comm.agree(error, f"finishing checkpoint {root}")


def _manifest(kind: str, tensors: Mapping[str, DistTensor], config: Dict[str, Any],
              world_size: int) -> Dict[str, Any]:
    entries = {}
    for i, (key, tensor) in enumerate(tensors.items()):
        shards = [{"file": f"t{i}_r{r}.pt", "start": tensor.layout.range_of(r)[0],
                   "stop": tensor.layout.range_of(r)[1]} for r in range(world_size)]
        entries[key] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).split(".")[-1],
                        "shards": shards}
    return {"format": FORMAT, "version": VERSION, "kind": kind, "world_size": world_size,
            "config": config, "tensors": entries}


def read_manifest(path: PathLike, kind: str) -> Dict[str, Any]:
    """The manifest of a complete checkpoint of ``kind``.

    Raises:
        CheckpointError: if the folder is missing, incomplete or of another kind.
    """
    root = Path(path)
    if not (root / DONE).is_file() or not (root / MANIFEST).is_file():
        raise CheckpointError(f"{root} is not a complete pyg_dist checkpoint (no {DONE} "
                              f"marker or {MANIFEST}): was the save interrupted?")
    manifest = json.loads((root / MANIFEST).read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(f"{root}/{MANIFEST}: format {manifest.get('format')!r} version "
                              f"{manifest.get('version')!r}, expected {FORMAT!r} {VERSION}")
    if manifest.get("kind") != kind:
        raise CheckpointError(f"{root} holds a {manifest.get('kind')} checkpoint, "
                              f"not a {kind} one")
    return manifest


def load_tensors(path: PathLike, kind: str, tensors: Mapping[str, DistTensor]) -> Dict[str, Any]:
    """Fills ``tensors`` from the checkpoint folder ``path`` (collective); returns the
    saved ``config``. Works whatever number of ranks saved it."""
    comm = _comm_of(tensors)
    error: Optional[Exception] = None
    manifest: Dict[str, Any] = {}
    try:
        manifest = read_manifest(path, kind)
        for key, tensor in tensors.items():
            entry = manifest["tensors"].get(key)
            if entry is None:
                raise CheckpointError(f"checkpoint {path} has no tensor '{key}' (it holds "
                                      f"{sorted(manifest['tensors'])})")
            _load_rows(Path(path), key, entry, tensor)
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        error = exc
    comm.agree(error, f"loading checkpoint {path}")
    return dict(manifest["config"])


def _load_rows(root: Path, key: str, entry: Dict[str, Any], tensor: DistTensor) -> None:
    shape, dtype = tuple(entry["shape"]), entry["dtype"]
    if shape != tuple(tensor.shape) or dtype != str(tensor.dtype).split(".")[-1]:
        raise CheckpointError(f"checkpoint {root}: '{key}' has shape {shape} and dtype "
                              f"{dtype}, but '{tensor.name}' has shape {tuple(tensor.shape)} "
                              f"and dtype {tensor.dtype}")
    lo, hi = tensor.local_range
    covered = 0
    for shard in entry["shards"]:
        a, b = max(lo, int(shard["start"])), min(hi, int(shard["stop"]))
        if a >= b:
            continue
        file = root / shard["file"]
        obj = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        if (obj["start"], obj["stop"]) != (shard["start"], shard["stop"]):
            raise CheckpointError(f"{file} holds rows [{obj['start']}, {obj['stop']}), the "
                                  f"manifest says [{shard['start']}, {shard['stop']})")
        start = int(obj["start"])
        with tensor.lock:
            tensor.local_data[a - lo:b - lo] = obj["rows"][a - start:b - start]
        covered += b - a
    if covered != hi - lo:
        raise CheckpointError(f"checkpoint {root}: the shards of '{key}' cover {covered} of "
                              f"this rank's {hi - lo} rows [{lo}, {hi})")
