"""Checkpoints of a whole training job: model, optimizers, embeddings and loader positions.

::

    from pyg_dist import checkpoint

    info = checkpoint.load(DIR, model=ddp, optimizer=opt, loaders=[train_loader])
    start = info.step if info is not None else 0        # None: no checkpoint yet
    ...
    checkpoint.save(DIR, step=step, model=ddp, optimizer=opt, loaders=[train_loader])

Both are collective: every rank calls them with the same kinds of objects. The model and
dense optimizers go through ``torch.distributed.checkpoint``, ``DistEmbedding`` tables
and sparse optimizers through :mod:`pyg_dist.embedding.checkpoint`, and every rank's
loader positions and torch RNG state into a small file of its own (the layout is in
:mod:`pyg_dist.checkpoint.files`). A save is atomic: a crash during it leaves the
previous checkpoint loadable; the newest ``keep`` versions are kept.

A checkpoint saved with ``k`` ranks loads with ``k'``: model, optimizers and embeddings
rescale. Loader positions within an epoch do not map to another world size (each rank's
seeds differ), so then every loader starts at the beginning of the epoch after the saved
position (the rest of the interrupted epoch is skipped, nothing is repeated), and a
warning says so. An error on any rank raises on every rank, naming the rank.

A checkpoint from elsewhere is safe to load: nothing in it is unpickled beyond tensors and
plain containers (DCP's metadata goes through a restricted unpickler, its values and every
other ``.pt`` file through ``torch.load(weights_only=True)``, the rest is JSON checked field
by field), every file read is checked against the digest recorded at save time, and a
damaged checkpoint raises :class:`CheckpointError` naming the file.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from pyg_dist.checkpoint import args, files
from pyg_dist.checkpoint.dense import check_dense, load_dense, save_dense
from pyg_dist.embedding.checkpoint import load_checkpoint, save_checkpoint
from pyg_dist.embedding.checkpoint_manifest import CheckpointError
from pyg_dist.loader.state import LoaderState
from pyg_dist.rpc import runtime

__all__ = ["save", "load", "CheckpointInfo", "CheckpointError"]

log = logging.getLogger("pyg_dist")
PathLike = Union[str, os.PathLike]


@dataclass
class CheckpointInfo:
    """What :func:`load` restored.

    Args:
        path: the version folder loaded.
        step: the step it was saved at.
        world_size: ranks that saved it.
        incarnation: torchrun restarts of the job when it was saved.
        exact: loader positions were restored exactly (same world size); else loaders
            start at the beginning of the epoch after the saved position.
        positions: ``(epoch, batch)`` each loader resumes at.
        extra: the user's values given to :func:`save`.
    """
    path: str
    step: int
    world_size: int
    incarnation: int
    exact: bool
    positions: List[Tuple[int, int]] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class _Ranks:
    """This process's rank, the job's size and the gloo group of collectives."""
    rank: int
    world_size: int
    group: Any = None

    @classmethod
    def current(cls) -> "_Ranks":
        group = runtime.current().cpu_group if runtime.is_initialized() else None
        if dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), group)
        return cls(0, 1, None)

    def gather(self, error: Optional[BaseException], value: Any, what: str) -> List[Any]:
        """Every rank's ``value``; raises on every rank if ``what`` failed on any."""
        message = None if error is None else f"{type(error).__name__}: {error}"
        gathered = [(message, value)]
        if self.world_size > 1:
            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, (message, value), group=self.group)
        if error is not None:
            raise error
        failed = [f"rank {r}: {m}" for r, (m, _) in enumerate(gathered) if m is not None]
        if failed:
            raise RuntimeError(f"{what} failed on {len(failed)} other rank(s):\n"
                               + "\n".join(failed))
        return [v for _, v in gathered]


def _restarts() -> int:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def save(path: PathLike, step: int, *, model: Optional[torch.nn.Module] = None,
         optimizer: Any = None, embeddings: Any = (), sparse_optimizers: Any = (),
         loaders: Sequence[Any] = (), extra: Optional[Dict[str, Any]] = None,
         keep: int = 2) -> str:
    """Saves a checkpoint version into ``path`` and makes it the current one (collective).

    Args:
        path: the checkpoint folder, visible to every rank (created if missing).
        step (int): the training step (e.g. batches trained so far).
        model (torch.nn.Module, optional): the model (plain or DDP).
        optimizer (Optimizer or list, optional): dense optimizers of ``model``.
        embeddings (DistEmbedding or list): tables to save.
        sparse_optimizers (SparseOptimizer or list): their optimizers.
        loaders (list): loaders whose positions to save (take them after the step).
        extra (dict, optional): JSON values saved alongside (e.g. the epoch's loss).
        keep (int): complete versions to keep (older ones are removed after publishing).

    Returns:
        the name of the new version.

    Raises:
        TypeError, ValueError: naming the argument that is not what is expected.
        CheckpointError: when ``path/LATEST`` exists but is not a regular file.
    """
    ranks, extra = _Ranks.current(), extra if extra is not None else {}
    error, name, objs, what = None, None, None, None
    try:
        args.check_path(path)
        objs = args.objects(model, optimizer, embeddings, sparse_optimizers, loaders)
        args.check_save(step, keep, extra)
        what = objs.kinds()
        if ranks.rank == 0:
            Path(path).mkdir(parents=True, exist_ok=True)
            files.check_pointer(Path(path))
            name = files.new_name(step)
            (Path(path) / name).mkdir()
    except Exception as exc:  # raised on every rank by gather
        error = exc
    gathered = ranks.gather(error, (name, what), f"saving checkpoint {path}")
    _same_everywhere([w for _, w in gathered], "save")
    root, name = Path(path), gathered[0][0]
    try:
        _save_parts(ranks, root, name, step, objs, extra, keep)
    except Exception:
        if ranks.rank == 0:  # the previous version stays current
            files.remove(root / name)
        raise
    return name


def _same_everywhere(whats: List[Any], verb: str) -> None:
    if len(set(whats)) > 1:
        seen = "; ".join(f"rank {r}: model={w[0]}, optimizers={w[1]}, embeddings={w[2]}, "
                         f"loaders={w[3]}" for r, w in enumerate(whats))
        raise ValueError(f"checkpoint.{verb} got different objects on different ranks ({seen})"
                         f": every rank must pass the same kinds")


def _save_parts(ranks: _Ranks, root: Path, name: str, step: int, objs: args.Objects,
                extra: Dict[str, Any], keep: int) -> None:
    folder = root / name
    if objs.model is not None:
        save_dense(folder / files.MODEL, objs.model, objs.optimizers, ranks.group)
    if objs.embeddings or objs.sparse_optimizers:
        save_checkpoint(folder / files.EMBEDDINGS, objs.embeddings, objs.sparse_optimizers)
    error = None
    try:
        files.write_rank_state(folder / files.rank_file(ranks.rank), ranks.rank,
                               ranks.world_size, [ld.state_dict() for ld in objs.loaders],
                               torch.get_rng_state())
    except Exception as exc:
        error = exc
    ranks.gather(error, None, f"saving checkpoint {root}")
    digests = _digest_version(ranks, folder)
    try:
        if ranks.rank == 0:
            info = files.Info(step, ranks.world_size, _restarts(), objs.model is not None,
                              bool(objs.optimizers), bool(objs.embeddings or
                                                          objs.sparse_optimizers),
                              len(objs.loaders), extra, digests)
            files.publish(root, name, info, keep)
    except Exception as exc:
        error = exc
    ranks.gather(error, None, f"publishing checkpoint {root / name}")


def _digest_version(ranks: _Ranks, folder: Path) -> Dict[str, str]:
    """Collective: the digest of every file of the version ``folder`` (rank 0 lists them,
    each rank reads its share)."""
    error, names, digests = None, None, {}
    try:
        names = files.version_files(folder) if ranks.rank == 0 else None
    except Exception as exc:
        error = exc
    names = ranks.gather(error, names, f"listing checkpoint {folder}")[0]
    try:
        digests = files.digest_files(folder, names[ranks.rank::ranks.world_size])
    except Exception as exc:
        error = exc
    shares = ranks.gather(error, digests, f"computing digests of checkpoint {folder}")
    return {rel: value for share in shares for rel, value in sorted(share.items())}


def load(path: PathLike, *, model: Optional[torch.nn.Module] = None, optimizer: Any = None,
         embeddings: Any = (), sparse_optimizers: Any = (), loaders: Sequence[Any] = (),
         restore_rng: bool = True) -> Optional[CheckpointInfo]:
    """Loads the current version of checkpoint ``path`` into the objects given
    (collective). Returns ``None`` on every rank when there is no checkpoint yet (no
    ``path`` or no ``LATEST`` in it).

    Nothing is unpickled beyond plain tensors and containers: DCP's metadata goes through
    a restricted unpickler, every other file through ``weights_only=True`` or JSON. Every
    file that is read is first checked against the digest recorded at save time.

    Args:
        path: the checkpoint folder.
        model, optimizer, embeddings, sparse_optimizers, loaders: as in :func:`save`
            (the checkpoint must hold what is asked for).
        restore_rng (bool): also restore torch's CPU RNG state of each rank (same world
            size only), so dropout after a resume draws as it would have.

    Raises:
        CheckpointError: naming the file, when the checkpoint is damaged (also a
            ``LATEST`` that is not a regular file naming a complete version) or lacks what
            is asked for (:class:`RuntimeError` naming the rank on the others).
        TypeError, ValueError: naming the argument that is not what is expected.
    """
    ranks = _Ranks.current()
    error, found, objs = None, None, None
    try:
        args.check_path(path)
        objs = args.objects(model, optimizer, embeddings, sparse_optimizers, loaders)
        args.check_flag(restore_rng, "restore_rng")
        found = _check_version(Path(path), objs, ranks, restore_rng)
    except Exception as exc:  # raised on every rank by gather
        error = exc
    gathered = ranks.gather(error, found, f"loading checkpoint {path}")
    if len({repr(g) for g in gathered}) > 1:
        raise CheckpointError(f"ranks see different versions of checkpoint {path}: is it on a "
                              f"file system every rank shares?")
    if found is None:
        return None
    name, info = found[0], files.Info(**found[1])
    folder = Path(path) / name
    if objs.model is not None:
        load_dense(folder / files.MODEL, objs.model, objs.optimizers, ranks.group)
    if objs.embeddings or objs.sparse_optimizers:
        load_checkpoint(folder / files.EMBEDDINGS, objs.embeddings, objs.sparse_optimizers)
    exact, positions = info.world_size == ranks.world_size, []
    try:
        positions = _restore_positions(folder, info, ranks, objs.loaders, exact, restore_rng)
    except Exception as exc:
        error = exc
    ranks.gather(error, None, f"loading checkpoint {folder}")
    return CheckpointInfo(str(folder), info.step, info.world_size, info.incarnation, exact,
                          positions, info.extra)


def _check_version(root: Path, objs: args.Objects, ranks: _Ranks,
                   restore_rng: bool) -> Optional[Tuple[str, Dict[str, Any]]]:
    """The current version's name and ``info.json`` fields (``None`` without one), after
    checking that it holds what is asked for, that this rank's share of the files to
    read match their digests, and the model's DCP metadata."""
    name = files.current(root)
    if name is None:
        return None
    folder = root / name
    info = files.Info.read(folder / files.INFO)
    _check_holds(folder, info, objs)
    reads = [files.MODEL + "/"] if objs.model is not None else []
    reads += [files.EMBEDDINGS + "/"] if objs.embeddings or objs.sparse_optimizers else []
    reads += ["rank_"] if objs.loaders or restore_rng else []
    if info.digests is None:
        files.note_old_version(folder)
    else:
        needed = [rel for rel in sorted(info.digests) if rel.startswith(tuple(reads))]
        files.verify_files(folder, info.digests, needed[ranks.rank::ranks.world_size])
    if objs.model is not None:
        check_dense(folder / files.MODEL)
    return name, info.__dict__


def _check_holds(folder: Path, info: files.Info, objs: args.Objects) -> None:
    missing = [what for what, asked, held in (
        ("a model", objs.model is not None, info.model),
        ("dense optimizer state", bool(objs.optimizers), info.optimizer),
        ("embeddings", bool(objs.embeddings or objs.sparse_optimizers), info.embeddings))
        if asked and not held]
    if objs.loaders and len(objs.loaders) != info.loaders:
        missing.append(f"{len(objs.loaders)} loader state(s) (it has {info.loaders})")
    if missing:
        raise CheckpointError(f"checkpoint {folder} holds no {', '.join(missing)}")


def _restore_positions(folder: Path, info: files.Info, ranks: _Ranks, loaders: List[Any],
                       exact: bool, restore_rng: bool) -> List[Tuple[int, int]]:
    """Loader positions (and RNG) of this rank; the next epoch's start on another world
    size."""
    if not loaders and not (exact and restore_rng):
        return []
    source = ranks.rank if exact else 0
    state = files.read_rank_state(folder / files.rank_file(source), info.world_size,
                                  info.loaders)
    positions = []
    for loader, saved in zip(loaders, state["loaders"]):
        if exact:
            loader.load_state_dict(saved)
            positions.append((saved["epoch"], saved["batch"]))
        else:
            epoch = LoaderState.from_dict(saved).next_epoch()
            loader.set_epoch(epoch)
            positions.append((epoch, 0))
    if not exact and loaders and ranks.rank == 0:
        log.warning("pyg_dist.checkpoint: %s was saved by %d ranks, this job has %d: loader "
                    "positions within an epoch do not carry over, so loaders start at epoch "
                    "%s from its beginning (saved position: epoch %d, batch %d)", folder,
                    info.world_size, ranks.world_size, positions[0][0],
                    state["loaders"][0]["epoch"], state["loaders"][0]["batch"])
    if exact and restore_rng:
        torch.set_rng_state(state["torch_rng"])
    return positions
