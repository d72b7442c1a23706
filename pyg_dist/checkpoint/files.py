"""The files of a training checkpoint folder: versions, the ``LATEST`` pointer, the
version's ``info.json`` and every rank's small state file.

::

    DIR/LATEST                          the current version, e.g. "step000000120-3f9c1a7e"
    DIR/<version>/model/                torch.distributed.checkpoint of model + optimizer
    DIR/<version>/embeddings/           pyg_dist.embedding checkpoint (tables + sparse optim)
    DIR/<version>/rank_<r>.pt           rank r: loader positions and torch's RNG state
    DIR/<version>/info.json             written last: step, world size, what the version holds

A save writes a new version folder; ``info.json`` is written once every rank finished,
then ``LATEST`` is replaced atomically (temporary file, fsync, ``os.replace``), then
versions beyond the newest ``keep`` are removed. A crash at any point leaves ``LATEST``
naming the previous, complete version.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from pyg_dist.embedding.checkpoint_files import atomic_write, remove
from pyg_dist.embedding.checkpoint_manifest import CheckpointError
from pyg_dist.loader.state import LoaderState

LATEST = "LATEST"
INFO = "info.json"
MODEL = "model"
EMBEDDINGS = "embeddings"
FORMAT = "pyg_dist.checkpoint"
VERSION = 1
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
    """
    step: int
    world_size: int
    incarnation: int
    model: bool
    optimizer: bool
    embeddings: bool
    loaders: int
    extra: Dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def read(cls, file: Path) -> "Info":
        try:
            raw = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{file}: cannot read ({exc})") from None
        names = {f.name: f.type for f in fields(cls)}
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
        if info.format != FORMAT or info.version != VERSION:
            raise CheckpointError(f"{file}: not a {FORMAT} version {VERSION} file "
                                  f"({info.format!r} version {info.version})")
        if info.step < 0 or info.world_size < 1 or info.loaders < 0:
            raise CheckpointError(f"{file}: step, world_size or loaders out of range")
        return info


def current(root: Path) -> Optional[str]:
    """The version ``LATEST`` names (``None`` when there is no checkpoint yet)."""
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_bytes().decode("utf-8", errors="replace").strip()
    if not _NAME.fullmatch(name) or not (root / name / INFO).is_file():
        raise CheckpointError(f"{pointer} names {name!r}, which is not a complete version "
                              f"of this checkpoint folder")
    return name


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
    try:
        obj = torch.load(file, weights_only=True)
    except Exception as exc:  # any unpickling failure: report it with the file
        raise CheckpointError(f"{file}: cannot load ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict) or set(obj) != {"rank", "world_size", "loaders", "torch_rng"}:
        raise CheckpointError(f"{file}: expected a dict with rank, world_size, loaders and "
                              f"torch_rng")
    if obj["world_size"] != world_size or not isinstance(obj["loaders"], list) \
            or len(obj["loaders"]) != num_loaders:
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
