""":func:`load`: the current version into the entries of ``state``, checked first."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch

from pyg_dist.checkpoint import _entries as ent
from pyg_dist.checkpoint import _files as files, _versions as versions
from pyg_dist.checkpoint._dense import check_dense, load_dense
from pyg_dist.checkpoint._entries import Entry
from pyg_dist.checkpoint._errors import CheckpointError
from pyg_dist.checkpoint._ranks import Ranks, same_everywhere
from pyg_dist.checkpoint._sharded import copy_rows, fill, plan_rows, split

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
        exact: loader positions (and per-rank state) were restored exactly (same world
            size); else loaders start at the beginning of the epoch after the saved
            position and stateful entries get rank 0's saved state.
        positions: ``(epoch, batch)`` each loader given resumes at, in key order.
        values: every JSON entry of the checkpoint, by key.
        extra: ``values["extra"]`` (the JSON value saved as ``state["extra"]``), or ``{}``.
    """
    path: str
    step: int
    world_size: int
    incarnation: int
    exact: bool
    positions: List[Tuple[int, int]] = field(default_factory=list)
    values: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)


def load(path: PathLike, state: Optional[Dict[str, Any]] = None, *, restore_rng: bool = True,
         version: Optional[str] = None, **removed: Any) -> Optional[CheckpointInfo]:
    """Loads the current version of checkpoint ``path`` into the entries of ``state``
    (collective). Returns ``None`` on every rank when there is no checkpoint yet (no
    ``path`` or no ``LATEST`` in it).

    Every key of ``state`` must be in the checkpoint with the same kind (and class, for
    objects with ``state_dict()``); keys saved but not asked for are not loaded. JSON
    entries are written back into ``state``. Sharded tensors (``DistEmbedding`` rows,
    sparse optimizer state) load on any number of ranks; dense modules and optimizers go
    through DCP. Nothing is unpickled beyond tensors and plain containers, and every file
    read is first checked against the digest recorded at save time.

    Args:
        path: the checkpoint folder.
        state (dict): ``{name: object}`` as given to :func:`~pyg_dist.checkpoint.save`.
        restore_rng (bool): also restore torch's CPU RNG state of each rank (same world
            size only), so dropout after a resume draws as it would have.
        version (str): load this version (a folder name such as
            ``"step000000120-3f9c1a7e"``, as ``pyg-dist-checkpoint list DIR`` shows)
            instead of the one ``LATEST`` names; it must be complete.

    Raises:
        CheckpointError: naming the file or key, when the checkpoint is damaged (also a
            ``LATEST`` that is not a regular file naming a complete version: the message
            lists the complete versions and how to resume from one), of another
            version, or lacks a key (or holds it as another kind); :class:`RuntimeError`
            naming the rank on the other ranks.
        TypeError, ValueError: naming the key or argument that is not what is expected;
            a keyword removed after 0.1.0 (``model=``, ...) names its ``state=`` form.
    """
    ent.refuse_keywords("load", removed)
    ranks = Ranks.current()
    items, found = _agreed_version(path, state, ranks, restore_rng, version)
    if found is None:
        return None
    folder, info = Path(path) / found[0], files.Info(**found[1])
    exact, positions = _restore(folder, info, items, ranks, restore_rng)
    for entry in (e for e in items if e.kind == ent.JSON and state and e.key in state):
        state[entry.key] = info.values[entry.key]
    return CheckpointInfo(str(folder), info.step, info.world_size, info.incarnation, exact,
                          positions, dict(info.values), info.values.get("extra", {}))


def _agreed_version(path: PathLike, state: Optional[Dict[str, Any]], ranks: Ranks,
                    restore_rng: bool, version: Optional[str] = None
                    ) -> Tuple[List[Entry], Optional[Tuple[str, Dict[str, Any]]]]:
    """The entries asked for and the version to load, checked on every rank (collective).

    Args:
        path: the checkpoint folder.
        state (dict): the entries to load, as given to :func:`load`.
        ranks (Ranks): the ranks loading.
        restore_rng (bool): whether torch's RNG state is restored too.
        version (str): the version to load (``None``: the one ``LATEST`` names).

    Returns:
        the entries, and the version's ``(folder name, info)`` (``None`` when there is
        no checkpoint yet), the same on every rank.
    """
    error, found, items, spec = None, None, [], None
    try:
        ent.check_path(path)
        items = ent.entries(dict(state) if state is not None else {})
        ent.check_flag(restore_rng, "restore_rng")
        spec = [e.spec() for e in items]
        found = _check_version(Path(path), items, ranks, restore_rng, version)
    except Exception as exc:  # raised on every rank by gather
        error = exc
    gathered = ranks.gather(error, (found, spec), f"loading checkpoint {path}")
    same_everywhere([s for _, s in gathered], "load")
    if len({repr(f) for f, _ in gathered}) > 1:
        raise CheckpointError(f"ranks see different versions of checkpoint {path}: is it on a "
                              f"file system every rank shares?")
    return items, found


def _restore(folder: Path, info: files.Info, items: List[Entry], ranks: Ranks,
             restore_rng: bool) -> Tuple[bool, List[Tuple[int, int]]]:
    """Loads the dense entries, then plans and applies the sharded ones (collective).

    Args:
        folder (Path): the version folder.
        info (files.Info): its recorded info.
        items (List[Entry]): the entries to fill.
        ranks (Ranks): the ranks loading.
        restore_rng (bool): whether torch's RNG state is restored too.

    Returns:
        whether the load is exact (same world size), and the loaders' positions.
    """
    _load_dense(folder, items, ranks)
    error: Optional[BaseException] = None
    exact, steps, positions = info.world_size == ranks.world_size, [], []
    try:
        steps, positions = _plan(folder, info, items, ranks, exact, restore_rng)
    except Exception as exc:
        error = exc
    ranks.gather(error, None, f"loading checkpoint {folder}")
    try:
        for apply in steps:
            apply()
    except Exception as exc:
        error = exc
    ranks.gather(error, None, f"restoring checkpoint {folder}")
    return exact, positions


def _check_version(root: Path, items: List[Entry], ranks: Ranks, restore_rng: bool,
                   version: Optional[str]) -> Optional[Tuple[str, Dict[str, Any]]]:
    """The name and ``info.json`` fields of ``version`` or the current version (``None``
    without one), after
    checking that it holds every entry asked for, that this rank's share of the files to
    read match their digests, and the DCP metadata."""
    name = versions.choose(root, version)
    if name is None:
        return None
    folder = root / name
    info = files.Info.read(folder / files.INFO)
    _check_holds(folder, info, items)
    kinds = {e.kind for e in items}
    reads = [files.MODEL + "/"] if kinds & {ent.MODULE, ent.OPTIMIZER} else []
    reads += [files.SHARDS + "/"] if ent.STATEFUL in kinds else []
    reads += ["rank_"] if kinds & {ent.LOADER, ent.STATEFUL} or restore_rng else []
    needed = [rel for rel in sorted(info.digests) if rel.startswith(tuple(reads))]
    files.verify_files(folder, info.digests, needed[ranks.rank::ranks.world_size])
    if kinds & {ent.MODULE, ent.OPTIMIZER}:
        check_dense(folder / files.MODEL)
    return name, info.__dict__


def _check_holds(folder: Path, info: files.Info, items: List[Entry]) -> None:
    for entry in items:
        saved = info.entries.get(entry.key)
        if saved is None:
            held = ", ".join(f"'{k}' ({' '.join(v).strip()})" for k, v in
                             sorted(info.entries.items())) or "nothing"
            raise CheckpointError(f"checkpoint {folder} has no entry '{entry.key}' (it holds "
                                  f"{held})")
        if saved != [entry.kind, entry.cls]:
            raise CheckpointError(f"checkpoint {folder}: entry '{entry.key}' was saved as a "
                                  f"{' '.join(saved).strip()}, but is loaded into a "
                                  f"{entry.describe()}")


def _load_dense(folder: Path, items: List[Entry], ranks: Ranks) -> None:
    modules = {e.key: e.obj for e in items if e.kind == ent.MODULE}
    if not modules:
        return
    owners = ent.owner_of(items)
    optimizers = {e.key: (e.obj, modules[owners[e.key]]) for e in items
                  if e.kind == ent.OPTIMIZER}
    load_dense(folder / files.MODEL, modules, optimizers, ranks.group)


def _plan(folder: Path, info: files.Info, items: List[Entry], ranks: Ranks, exact: bool,
          restore_rng: bool) -> Tuple[List[Callable[[], None]], List[Tuple[int, int]]]:
    """Reads and checks everything this rank restores; returns what to apply (nothing is
    changed yet) and the loaders' positions."""
    loaders = [e for e in items if e.kind == ent.LOADER]
    stateful = [e for e in items if e.kind == ent.STATEFUL]
    if not loaders and not stateful and not (exact and restore_rng):
        return [], []
    source = folder / files.rank_file(ranks.rank if exact else 0)
    saved = files.read_rank_state(source, info.world_size, [e.key for e in loaders],
                                  [e.key for e in stateful])
    steps = [_stateful_step(folder, info, e, saved["stateful"][e.key]) for e in stateful]
    positions = []
    for entry in loaders:
        step, position = _loader_step(entry, saved["loaders"][entry.key], exact)
        steps.append(step)
        positions.append(position)
    if not exact and loaders and ranks.rank == 0:
        log.warning("pyg_dist.checkpoint: %s was saved by %d ranks, this job has %d: loader "
                    "positions within an epoch do not carry over, so loaders start at epoch "
                    "%s from its beginning", folder, info.world_size, ranks.world_size,
                    positions[0][0])
    if exact and restore_rng:
        steps.append(lambda rng=saved["torch_rng"]: torch.set_rng_state(rng))
    return steps, positions


def _stateful_step(folder: Path, info: files.Info, entry: Entry,
                   tree: Any) -> Callable[[], None]:
    """Reads the rows of ``entry``'s sharded tensors that this rank holds; returns the
    step that copies them and calls ``load_state_dict``."""
    where = f"state['{entry.key}']"
    _, live = split(entry.obj.state_dict(), f"{where}.state_dict()")
    saved = info.tensors(entry.key, folder)
    if len(saved) != len(live):
        raise CheckpointError(f"{folder / files.INFO}: {where} holds {len(saved)} sharded "
                              f"tensor(s), its state_dict() now has {len(live)}")
    pieces = [plan_rows(folder, s, t, f"{where} sharded tensor {i}")
              for i, (s, t) in enumerate(zip(saved, live))]
    filled = fill(tree, live, f"{folder / files.INFO}: {where}")

    def apply() -> None:
        for tensor, rows in zip(live, pieces):
            copy_rows(tensor, rows)
        entry.obj.load_state_dict(filled)
    return apply


def _loader_step(entry: Entry, saved: Dict[str, Any],
                 exact: bool) -> Tuple[Callable[[], None], Tuple[int, int]]:
    if exact:
        return (lambda: entry.obj.load_state_dict(saved)), (saved["epoch"], saved["batch"])
    from pyg_dist.loader._state import LoaderState  # here: it imports torch_geometric

    epoch = LoaderState.from_dict(saved).next_epoch()
    return (lambda: entry.obj.set_epoch(epoch)), (epoch, 0)
