""":func:`save`: every entry of ``state`` into a new version, published atomically.

A save runs in named phases, each one function here (the order, and what a failure in
each leaves, is the invariant of :mod:`pyg_dist.checkpoint._versions`): :func:`_begin`
(version created, its name agreed), ``save_dense`` (dense state written),
:func:`_write_rank` (this rank's shards and state written), :func:`_digest_version`
(digests computed), then on rank 0 ``versions.write_info`` (``info.json`` written),
``versions.switch_latest`` (``LATEST`` switched) and ``versions.prune_versions``
(pruned), and :func:`_agree_published` (every rank's final agreement). Until ``LATEST``
switches a failure removes the new folder and the previous version stays current; after
it, nothing removes the new version and the failure is reported as published.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch

from pyg_dist.checkpoint import _entries as ent
from pyg_dist.checkpoint import _files as files, _versions as versions
from pyg_dist.checkpoint._dense import save_dense
from pyg_dist.checkpoint._entries import Entry
from pyg_dist.checkpoint._errors import CheckpointError
from pyg_dist.checkpoint._ranks import Ranks, restarts, same_everywhere
from pyg_dist.checkpoint._sharded import TensorEntry, shard_file, split, write_rows
from pyg_dist.format import _files as fs

PathLike = Union[str, os.PathLike]


def save(path: PathLike, step: int, state: Optional[Dict[str, Any]] = None, *,
         keep: int = 2, **removed: Any) -> str:
    """Saves every entry of ``state`` as a new version of ``path`` and makes it the
    current one (collective: every rank passes the same keys and kinds).

    Args:
        path: the checkpoint folder, visible to every rank (created if missing).
        step (int): the training step (e.g. batches trained so far).
        state (dict): ``{name: object}``; an object is a ``torch.nn.Module`` (plain or
            DDP), a torch ``Optimizer`` (of a module in ``state``), a pyg_dist loader,
            anything with ``state_dict()``/``load_state_dict()`` (``DistEmbedding``,
            ``SparseAdam``/``SparseAdagrad``, LR schedulers, your own objects) or a JSON
            value.
        keep (int): complete versions to keep (older ones are removed after publishing).

    Returns:
        the name of the new version.

    Raises:
        TypeError, ValueError: naming the key or argument that is not what is expected, or
            a key whose kind differs between ranks; a keyword removed after 0.1.0
            (``model=``, ``optimizer=``, ...) is a ``TypeError`` naming its ``state=`` form.
        CheckpointError: when ``path/LATEST`` exists but is not a regular file, or when a
            step after ``LATEST`` switched to the new version failed (a rank died while
            every rank met a last time, pruning failed): the message says the version is
            published and current. Any other failure leaves the previous version current.
    """
    ent.refuse_keywords("save", removed)
    ranks, root = Ranks.current(), Path(path) if isinstance(path, (str, os.PathLike)) else None
    items, name = _begin(ranks, root, path, step, keep, state)
    try:
        every, digests = _write_version(ranks, root / name, items)
    except Exception:
        if ranks.rank == 0:  # LATEST was not switched: the previous version stays current
            fs.remove_version(root, name)
        raise
    _publish(ranks, root, name, lambda: files.Info(
        step, ranks.world_size, restarts(), {e.key: [e.kind, e.cls] for e in items},
        {e.key: e.obj for e in items if e.kind == ent.JSON},
        _sharded(root / name, items, every), digests), keep)
    return name


def _begin(ranks: Ranks, root: Optional[Path], path: Any, step: int, keep: int,
           state: Optional[Dict[str, Any]]) -> Tuple[List[Entry], str]:
    """Checks the arguments, creates the new version folder (rank 0) and agrees on its
    name and on the entries' kinds with every rank (collective)."""
    error, name, items, spec = None, None, [], None
    try:
        ent.check_path(path)
        items = ent.entries(dict(state) if state is not None else {})
        ent.check_save(step, keep)
        spec = [e.spec() for e in items]
        if ranks.rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            files.check_pointer(root)
            name = fs.new_version(root, step)
    except Exception as exc:  # raised on every rank by gather
        error = exc
    try:
        gathered = ranks.gather(error, (name, spec), f"saving checkpoint {path}")
        same_everywhere([s for _, s in gathered], "save")
    except Exception:
        if name is not None:
            fs.remove_version(root, name)
        raise
    return items, gathered[0][0]


def _write_version(ranks: Ranks, folder: Path, items: List[Entry]
                   ) -> Tuple[List[Dict[str, List[Any]]], Dict[str, str]]:
    """Writes the dense state, this rank's shards and state file, and the digests of every
    file (collective); returns every rank's sharded ranges and the digests."""
    modules = {e.key: e.obj for e in items if e.kind == ent.MODULE}
    if modules:
        owners = ent.owner_of(items)
        optimizers = {e.key: (e.obj, modules[owners[e.key]]) for e in items
                      if e.kind == ent.OPTIMIZER}
        save_dense(folder / files.MODEL, modules, optimizers, ranks.group)
    error, shapes = None, {}
    try:
        shapes = _write_rank(folder, ranks, items)
    except Exception as exc:
        error = exc
    every = ranks.gather(error, shapes, f"saving checkpoint {folder.parent}")
    return every, _digest_version(ranks, folder)


def _publish(ranks: Ranks, root: Path, name: str, info: Callable[[], files.Info],
             keep: int) -> None:
    """Rank 0 completes version ``name`` (``info.json``), switches ``LATEST`` to it and
    prunes; then every rank agrees. A failure before the switch removes the version and
    raises; after it, the version stays current and the failure raises as
    :class:`CheckpointError` saying so."""
    error, switched = None, False
    if ranks.rank == 0:
        try:
            versions.write_info(root / name, info())
            previous = versions.switch_latest(root, name)
            switched = True
            versions.prune_versions(root, name, keep, previous)
        except Exception as exc:
            error = exc
    try:
        _agree_published(ranks, error, root / name)
    except Exception as exc:
        if switched:
            raise CheckpointError(f"checkpoint {root / name} is published and current "
                                  f"(LATEST names it), but a step after publishing it "
                                  f"failed: {type(exc).__name__}: {exc}") from exc
        if ranks.rank == 0:
            fs.remove_version(root, name)
        raise


def _agree_published(ranks: Ranks, error: Optional[BaseException], folder: Path) -> None:
    """Every rank's final agreement that the version ``folder`` is published."""
    ranks.gather(error, None, f"publishing checkpoint {folder}")


def _write_rank(folder: Path, ranks: Ranks, items: List[Entry]) -> Dict[str, List[Any]]:
    """Writes this rank's shards and state file; returns ``{key: [(shape, dtype, start,
    stop)]}`` of each stateful entry's sharded tensors."""
    plain, shapes = {}, {}
    stateful = [e for e in items if e.kind == ent.STATEFUL]
    for index, entry in enumerate(stateful):
        tree, tensors = split(entry.obj.state_dict(), f"state['{entry.key}'].state_dict()")
        ranges = write_rows(folder, index, tensors, ranks.rank)
        plain[entry.key] = tree
        shapes[entry.key] = [(list(t.shape), str(t.dtype).split(".")[-1], *r)
                             for t, r in zip(tensors, ranges)]
    loaders = {e.key: e.obj.state_dict() for e in items if e.kind == ent.LOADER}
    files.write_rank_state(folder / files.rank_file(ranks.rank), ranks.rank,
                           ranks.world_size, loaders, plain, torch.get_rng_state())
    return shapes


def _sharded(folder: Path, items: List[Entry], every: List[Dict[str, List[Any]]]
             ) -> Dict[str, List[Dict[str, Any]]]:
    """The ``sharded`` field of ``info.json`` from every rank's ranges (checked)."""
    out = {}
    stateful = [e for e in items if e.kind == ent.STATEFUL]
    for index, entry in enumerate(stateful):
        per_rank = [shapes[entry.key] for shapes in every]
        if any(len(p) != len(per_rank[0]) for p in per_rank):
            raise ValueError(f"state['{entry.key}']: ranks hold different numbers of sharded "
                             f"tensors ({[len(p) for p in per_rank]})")
        tensors = []
        for i, (shape, dtype, _, _) in enumerate(per_rank[0]):
            if any(tuple(p[i][:2]) != (shape, dtype) for p in per_rank):
                raise ValueError(f"state['{entry.key}']: sharded tensor {i} differs in shape "
                                 f"or dtype between ranks")
            shards = [[shard_file(index, i, r), p[i][2], p[i][3]]
                      for r, p in enumerate(per_rank)]
            raw = {"shape": shape, "dtype": dtype, "shards": shards}
            try:
                TensorEntry.from_json(raw, f"state['{entry.key}'] sharded tensor {i}")
            except CheckpointError as exc:
                raise ValueError(f"{exc}: its rows are not split over the ranks in order") \
                    from None
            tensors.append(raw)
        out[entry.key] = tensors
    return out


def _digest_version(ranks: Ranks, folder: Path) -> Dict[str, str]:
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
