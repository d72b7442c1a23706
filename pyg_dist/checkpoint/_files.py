"""The files of a checkpoint folder: versions, ``info.json`` and every rank's state file.

::

    DIR/LATEST                  the current version, e.g. "step000000120-3f9c1a7e"
    DIR/<version>/model/        torch.distributed.checkpoint of every module and optimizer
                                entry, keyed by the user's keys
    DIR/<version>/shards/       rows of sharded tensors (DistEmbedding tables, sparse
                                optimizer state) by global row: e_i_r<rank>.pt
    DIR/<version>/rank_<r>.pt   rank r: loader positions, the plain part of every stateful
                                entry's state_dict, torch's RNG state
    DIR/<version>/info.json     written last: step, world size, every entry's kind, the JSON
                                values, where each sharded tensor's rows are, and the
                                digest of every other file of the version

Versions and ``LATEST`` are :mod:`pyg_dist.format._files`'s versioned folders: a save writes
a new version, ``info.json`` once every rank finished, then replaces ``LATEST`` atomically,
then removes versions beyond the newest ``keep``. ``LATEST`` only ever names a complete
version, which stays on disk until a newer complete one is published (the phases of a save
and what a failure in each leaves are in :mod:`pyg_dist.checkpoint._versions`).

``info.json`` is version 3. Versions 1 and 2 (fixed model/optimizer/embeddings slots, an
embedding checkpoint of their own) are refused with a message naming the version.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List

import torch
from torch import Tensor

from pyg_dist.checkpoint._entries import KINDS
from pyg_dist.checkpoint._errors import CheckpointError
from pyg_dist.checkpoint._sharded import TensorEntry
from pyg_dist.format import _files as fs
from pyg_dist.format._digest import DigestMismatch, check_file, file_digest
from pyg_dist.format._jsonio import read_json

LATEST = fs.LATEST
INFO = "info.json"
MODEL = "model"
SHARDS = "shards"
FORMAT = "pyg_dist.checkpoint"
VERSION = 3
_RANK_KEYS = {"rank", "world_size", "loaders", "stateful", "torch_rng"}


def rank_file(rank: int) -> str:
    return f"rank_{rank}.pt"


@dataclass
class Info:
    """What one version holds (``info.json``).

    Args:
        step: the training step the user saved at.
        world_size: ranks that saved it.
        incarnation: torchrun restarts of the saving job (``TORCHELASTIC_RESTART_COUNT``).
        entries: ``{key: [kind, class name of a stateful entry or ""]}``.
        values: ``{key: value}`` of the JSON entries.
        sharded: ``{key: [tensor entry]}`` of the stateful entries' sharded tensors.
        digests: ``{path relative to the version folder: digest}`` of every other file.
    """
    step: int
    world_size: int
    incarnation: int
    entries: Dict[str, List[str]] = field(default_factory=dict)
    values: Dict[str, Any] = field(default_factory=dict)
    sharded: Dict[str, List[Dict[str, Any]]] = field(default_factory=dict)
    digests: Dict[str, str] = field(default_factory=dict)
    format: str = FORMAT
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    def tensors(self, key: str, folder: Path) -> List[TensorEntry]:
        """The checked sharded tensor entries of ``key``."""
        where = folder / INFO
        return [TensorEntry.from_json(raw, f"{where}: sharded['{key}'][{i}]")
                for i, raw in enumerate(self.sharded.get(key, []))]

    @classmethod
    def read(cls, file: Path) -> "Info":
        """Reads and checks ``file``; raises :class:`CheckpointError` naming it."""
        try:
            fs.regular_file(file)
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{file}: cannot read ({exc})") from None
        raw = read_json(file, CheckpointError)
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise CheckpointError(f"{file}: not a {FORMAT} file")
        if raw.get("version") != VERSION:
            raise CheckpointError(f"{file}: {FORMAT} version {raw.get('version')!r} (written by "
                                  f"an earlier pyg_dist with fixed model/optimizer/embeddings "
                                  f"slots); this release reads version {VERSION} only: "
                                  f"start from scratch or save again with this release")
        names = {f.name: f.type for f in fields(cls)}
        if set(raw) != set(names):
            raise CheckpointError(f"{file}: expected the fields {sorted(names)}, got "
                                  f"{sorted(raw)}")
        for name, kind in names.items():
            want = {"int": int, "str": str}.get(kind, dict)
            if not isinstance(raw[name], want) or isinstance(raw[name], bool):
                raise CheckpointError(f"{file}: field '{name}' must be {want.__name__}")
        info = cls(**raw)
        info.check(file)
        return info

    def check(self, file: Path) -> None:
        if self.step < 0 or self.world_size < 1:
            raise CheckpointError(f"{file}: step or world_size out of range")
        for key, spec in self.entries.items():
            if not isinstance(spec, list) or len(spec) != 2 or spec[0] not in KINDS \
                    or not isinstance(spec[1], str):
                raise CheckpointError(f"{file}: entries['{key}'] must be [kind, class], got "
                                      f"{spec!r}")
        for name in ("values", "sharded"):
            extra = set(getattr(self, name)) - set(self.entries)
            if extra:
                raise CheckpointError(f"{file}: {name} of unknown entries {sorted(extra)}")
        for rel, value in self.digests.items():
            if not _inside(rel) or not isinstance(value, str):
                raise CheckpointError(f"{file}: field 'digests' must map paths inside the "
                                      f"version to digests, got {rel!r}: {value!r}")


def _inside(rel: str) -> bool:
    """Whether ``rel`` is a relative path that stays inside its folder."""
    path = PurePosixPath(rel)
    return bool(rel) and not path.is_absolute() and ".." not in path.parts \
        and "\\" not in rel and str(path) == rel


def regular_file(file: Path) -> os.stat_result:
    """``lstat`` of ``file``; raises :class:`CheckpointError` naming it unless it is a
    regular file (a folder, FIFO, device or link is refused before anything reads it)."""
    try:
        return fs.regular_file(file)
    except fs.PointerError as exc:
        raise CheckpointError(str(exc)) from None


def check_pointer(root: Path) -> bool:
    """Whether ``root/LATEST`` exists; raises :class:`CheckpointError` naming it when it
    exists but is not a regular file."""
    try:
        return fs.has_latest(root)
    except fs.PointerError as exc:
        raise CheckpointError(str(exc)) from None


def version_files(folder: Path) -> List[str]:
    """Every file of the version ``folder`` but ``info.json`` and temporary files, as
    sorted paths relative to it."""
    found = []
    for base, dirs, names in os.walk(folder):
        dirs.sort()
        for name in names:
            rel = Path(base, name).relative_to(folder).as_posix()
            if rel != INFO and not (name.startswith(".") and name.endswith(".tmp")):
                found.append(rel)
    return sorted(found)


def digest_files(folder: Path, names: List[str]) -> Dict[str, str]:
    """``{name: digest}`` of the files ``names`` of ``folder``."""
    return {name: file_digest(folder / name) for name in names}


def verify_files(folder: Path, digests: Dict[str, str], names: List[str]) -> None:
    """Checks the files ``names`` of ``folder`` against ``digests``; raises
    :class:`CheckpointError` naming one that is missing, not regular, or changed."""
    for name in names:
        file = folder / name
        try:
            fs.regular_file(file)
            check_file(file, digests[name])
        except (DigestMismatch, OSError, fs.PointerError) as exc:
            raise CheckpointError(str(exc)) from None


def write_rank_state(file: Path, rank: int, world_size: int, loaders: Dict[str, Any],
                     stateful: Dict[str, Any], rng: Tensor) -> None:
    """Writes rank ``rank``'s loader positions, plain stateful state and RNG state."""
    obj = {"rank": rank, "world_size": world_size, "loaders": loaders, "stateful": stateful,
           "torch_rng": rng}
    file.parent.mkdir(parents=True, exist_ok=True)
    fs.atomic_write(file, lambda f: torch.save(obj, f))


def read_rank_state(file: Path, world_size: int, loaders: List[str],
                    stateful: List[str]) -> Dict[str, Any]:
    """Loads a rank's state with ``weights_only=True`` and checks it holds ``loaders`` and
    ``stateful`` (keys); raises :class:`CheckpointError` naming the file."""
    try:
        fs.regular_file(file)
        obj = torch.load(file, weights_only=True)
    except fs.PointerError as exc:
        raise CheckpointError(str(exc)) from None
    except Exception as exc:  # any unpickling failure: report it with the file
        raise CheckpointError(f"{file}: cannot load ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(obj, dict) or set(obj) != _RANK_KEYS:
        raise CheckpointError(f"{file}: expected a dict with {sorted(_RANK_KEYS)}")
    for name, keys in (("loaders", loaders), ("stateful", stateful)):
        if not isinstance(obj[name], dict) or not set(keys) <= set(obj[name]):
            raise CheckpointError(f"{file}: {name} must hold {sorted(keys)}")
    if obj["world_size"] != world_size:
        raise CheckpointError(f"{file}: saved by world size {obj['world_size']!r}, info.json "
                              f"says {world_size}")
    rng = obj["torch_rng"]
    if not isinstance(rng, Tensor) or rng.dtype != torch.uint8 or rng.dim() != 1:
        raise CheckpointError(f"{file}: torch_rng must be a 1-D uint8 tensor")
    from pyg_dist.loader._state import LoaderState  # here: it imports torch_geometric

    for key in loaders:
        try:
            LoaderState.from_dict(obj["loaders"][key], f"loader '{key}'")
        except ValueError as exc:
            raise CheckpointError(f"{file}: {exc}") from None
    return obj
