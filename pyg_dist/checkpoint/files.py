"""The files of a training checkpoint folder: versions, the ``LATEST`` pointer, the
version's ``info.json`` and every rank's small state file.

::

    DIR/LATEST                          the current version, e.g. "step000000120-3f9c1a7e"
    DIR/<version>/model/                torch.distributed.checkpoint of model + optimizer
    DIR/<version>/embeddings/           pyg_dist.embedding checkpoint (tables + sparse optim)
    DIR/<version>/rank_<r>.pt           rank r: loader positions and torch's RNG state
    DIR/<version>/info.json             written last: step, world size, what the version holds,
                                        and the digest of every other file of the version

A save writes a new version folder; ``info.json`` is written once every rank finished,
then ``LATEST`` is replaced atomically (temporary file, fsync, ``os.replace``), then
versions beyond the newest ``keep`` are removed. A crash at any point leaves ``LATEST``
naming the previous, complete version.

Every file of a version but ``info.json`` has its digest (:mod:`pyg_dist.format.digest`)
in ``info.json`` (version 2): a file changed in place, truncated or missing is named at load.
Version 1 (no digests) is still read. ``LATEST`` must be a regular file naming a complete
version; anything else is a :class:`CheckpointError`, never "no checkpoint".
"""
from __future__ import annotations

import json
import logging
import os
import re
import stat
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from pyg_dist.embedding.checkpoint_files import atomic_write, remove
from pyg_dist.embedding.checkpoint_manifest import CheckpointError
from pyg_dist.loader.state import LoaderState
from pyg_dist.format.digest import DigestMismatch, check_file, file_digest

log = logging.getLogger("pyg_dist")

LATEST = "LATEST"
INFO = "info.json"
MODEL = "model"
EMBEDDINGS = "embeddings"
FORMAT = "pyg_dist.checkpoint"
VERSION = 2
_READS = (1, VERSION)  # version 1: no digests
_NAME = re.compile(r"step(\d{9,})-[0-9a-f]{8}")


def rank_file(rank: int) -> str:
    return f"rank_{rank}.pt"


@dataclass
class Info:
    """What one version holds (``info.json``).

    Args:
        step: the training step the user saved at.
        world_size: ranks that saved it.
        incarnation: torchrun restarts of the saving job (``TORCHELASTIC_RESTART_COUNT``).
        model, optimizer, embeddings: whether the version holds them (``optimizer``: the
            dense optimizers' state, beside the model's).
        loaders: loader states per rank.
        extra: the user's JSON values.
        digests: ``{path relative to the version folder: digest}`` of every other file
            of the version (``None`` in version 1 files, which have none).
    """
    step: int
    world_size: int
    incarnation: int
    model: bool
    optimizer: bool
    embeddings: bool
    loaders: int
    extra: Dict[str, Any] = field(default_factory=dict)
    digests: Optional[Dict[str, str]] = None
    format: str = FORMAT
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def read(cls, file: Path) -> "Info":
        """Reads and checks ``file``; raises :class:`CheckpointError` naming it."""
        try:
            regular_file(file)
            raw = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{file}: cannot read ({exc})") from None
        version = raw.get("version") if isinstance(raw, dict) else None
        names = {f.name: f.type for f in fields(cls) if version != 1 or f.name != "digests"}
        if not isinstance(raw, dict) or set(raw) != set(names):
            got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
            raise CheckpointError(f"{file}: expected the fields {sorted(names)}, got {got}")
        kinds = {"int": int, "bool": bool, "str": str}
        for name, kind in names.items():
            want = kinds.get(kind.split("[")[0], dict)
            value = raw[name]
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise CheckpointError(f"{file}: field '{name}' must be {want.__name__}, got "
                                      f"{value!r}")
        info = cls(**raw)
        if info.format != FORMAT or info.version not in _READS:
            raise CheckpointError(f"{file}: not a {FORMAT} file of version "
                                  f"{' or '.join(map(str, _READS))} ({info.format!r} version "
                                  f"{info.version})")
        if info.step < 0 or info.world_size < 1 or info.loaders < 0:
            raise CheckpointError(f"{file}: step, world_size or loaders out of range")
        for rel, value in (info.digests or {}).items():
            if not _inside(rel) or not isinstance(value, str):
                raise CheckpointError(f"{file}: field 'digests' must map paths inside the "
                                      f"version to digests, got {rel!r}: {value!r}")
        return info


def regular_file(file: Path) -> os.stat_result:
    """``lstat`` of ``file``; raises :class:`CheckpointError` naming it unless it is a
    regular file (a folder, FIFO, device or link is refused before anything reads it)."""
    try:
        info = os.lstat(file)
    except OSError as exc:
        raise CheckpointError(f"{file}: missing or unreadable ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{file}: not a regular file")
    return info


def _inside(rel: str) -> bool:
    """Whether ``rel`` is a relative path that stays inside its folder."""
    path = PurePosixPath(rel)
    return bool(rel) and not path.is_absolute() and ".." not in path.parts \
        and "\\" not in rel and str(path) == rel


def check_pointer(root: Path) -> bool:
    """Whether ``root/LATEST`` exists; raises :class:`CheckpointError` naming it when it
    exists but is not a regular file (e.g. a folder or a FIFO)."""
    pointer = root / LATEST
    if not os.path.lexists(pointer):
        return False
    regular_file(pointer)
    return True


def current(root: Path) -> Optional[str]:
    """The version ``LATEST`` names (``None`` when there is no checkpoint yet: no ``root``
    or no ``LATEST`` in it).

    Raises:
        CheckpointError: naming ``root`` or ``LATEST`` when ``root`` is not a folder, or
            ``LATEST`` is not a regular file naming a complete version.
    """
    if not os.path.lexists(root):
        return None
    if not root.is_dir():
        raise CheckpointError(f"checkpoint folder {root} is not a folder")
    if not check_pointer(root):
        return None
    pointer = root / LATEST
    try:
        with open(pointer, "rb") as handle:
            name = handle.read(256).decode("utf-8", errors="replace").strip()
    except OSError as exc:
        raise CheckpointError(f"{pointer}: cannot be read ({exc.strerror})") from None
    if not _NAME.fullmatch(name) or not (root / name).is_dir() \
            or not (root / name / INFO).is_file():
        raise CheckpointError(f"{pointer} names {name[:80]!r}, which is not a complete "
                              f"version of this checkpoint folder")
    return name


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
    """Checks the files ``names`` of ``folder`` against ``digests``.

    Raises:
        CheckpointError: naming the file that is missing, not a regular file, or whose
            bytes differ from those saved.
    """
    for name in names:
        file = folder / name
        regular_file(file)
        try:
            check_file(file, digests[name])
        except (DigestMismatch, OSError) as exc:
            raise CheckpointError(str(exc)) from None


_warned_old: List[bool] = []


def note_old_version(folder: Path) -> None:
    """Logs once, at debug level, that a version without digests is loaded unverified."""
    if not _warned_old:
        _warned_old.append(True)
        log.debug("pyg_dist.checkpoint: %s was saved without file digests (version 1): its "
                  "files are checked, but not against digests", folder)


def new_name(step: int) -> str:
    return f"step{step:09d}-{uuid.uuid4().hex[:8]}"


def publish(root: Path, name: str, info: Info, keep: int) -> None:
    """Completes version ``name``, points ``LATEST`` at it, keeps the newest ``keep``."""
    atomic_write(root / name / INFO, lambda f: f.write(info.to_json()), binary=False)
    atomic_write(root / LATEST, lambda f: f.write(name + "\n"), binary=False)
    versions = sorted((p for p in root.iterdir() if _NAME.fullmatch(p.name) and p.is_dir()),
                      key=lambda p: (int(_NAME.fullmatch(p.name).group(1)),
                                     (p / INFO).stat().st_mtime if (p / INFO).exists() else 0))
    complete = [p for p in versions if (p / INFO).is_file() and p.name != name]
    broken = [p for p in versions if not (p / INFO).is_file() and p.name != name]
    for old in complete[:max(0, len(complete) - (keep - 1))] + broken:  # crashed saves too
        remove(old)
    for stale in root.glob(".*.tmp"):
        remove(stale)


def write_rank_state(file: Path, rank: int, world_size: int, loaders: List[Dict[str, Any]],
                     rng: Tensor) -> None:
    obj = {"rank": rank, "world_size": world_size, "loaders": loaders, "torch_rng": rng}
    atomic_write(file, lambda f: torch.save(obj, f))


def read_rank_state(file: Path, world_size: int, num_loaders: int) -> Dict[str, Any]:
    """Loads a rank's state with ``weights_only=True`` and checks it; raises
    :class:`CheckpointError` naming the file."""
    regular_file(file)
    try:
        obj = torch.load(file, weights_only=True)
    except Exception as exc:  # any unpickling failure: report it with the file
        raise CheckpointError(f"{file}: cannot load ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(obj, dict) or set(obj) != {"rank", "world_size", "loaders", "torch_rng"}:
        raise CheckpointError(f"{file}: expected a dict with rank, world_size, loaders and "
                              f"torch_rng")
    if not isinstance(obj["loaders"], list):
        raise CheckpointError(f"{file}: loaders must be a list, got "
                              f"{type(obj['loaders']).__name__}")
    if obj["world_size"] != world_size or len(obj["loaders"]) != num_loaders:
        raise CheckpointError(f"{file}: holds {len(obj['loaders'])} loader state(s) of world "
                              f"size {obj['world_size']}, expected {num_loaders} of "
                              f"{world_size}")
    rng = obj["torch_rng"]
    if not isinstance(rng, Tensor) or rng.dtype != torch.uint8 or rng.dim() != 1:
        raise CheckpointError(f"{file}: torch_rng must be a 1-D uint8 tensor")
    for i, state in enumerate(obj["loaders"]):
        try:
            LoaderState.from_dict(state, f"loader {i}")
        except ValueError as exc:
            raise CheckpointError(f"{file}: {exc}") from None
    return obj
