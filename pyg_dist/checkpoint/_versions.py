"""The versions of a checkpoint folder: publishing one, choosing the one to load, listing
and verifying them, and making one current again.

The invariant every save keeps: ``DIR/LATEST`` only ever names a complete version (its
``info.json`` written last, after every rank's files and their digests), and that version
stays on disk until a newer complete one is published. In order, a save:

1. creates the version folder (its name agreed by every rank),
2. writes the dense state (DCP), 3. every rank's shards and state file,
4. computes the digests of every file, 5. writes ``info.json`` (rank 0; the version is
   complete), 6. switches ``LATEST`` to it (one atomic rename; the version is current),
7. prunes older versions (never the one ``LATEST`` names, see
   :func:`pyg_dist.format._files.prune`), 8. meets every rank once more.

A failure (a rank killed, a disk error) before step 6 leaves the previous version current
(the new folder is removed, or left for the next save to remove); from step 6 on, the new
version stays current and the failure is reported (:class:`CheckpointError` saying it is
published). Incomplete leftovers of a killed save, versions beyond ``keep`` and hidden
temporaries are removed by the next save's step 7.

When ``LATEST`` names a version that is missing or incomplete anyway (removed or damaged
outside the job), :func:`current` refuses, naming the complete versions left and the call
(``checkpoint.load(DIR, state, version=NAME)``) or command (``pyg-dist-checkpoint use DIR
NAME``) that resumes from one.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

from pyg_dist.checkpoint._dense import check_dense
from pyg_dist.checkpoint._errors import CheckpointError
from pyg_dist.checkpoint._files import INFO, MODEL, Info, verify_files, version_files
from pyg_dist.format import _files as fs


def complete(folder: Path) -> bool:
    """Whether the version ``folder`` was completed (its ``info.json`` is written)."""
    return (folder / INFO).is_file()


def write_info(folder: Path, info: Info) -> None:
    """Completes the version ``folder``: writes its ``info.json`` atomically."""
    fs.write_text(folder / INFO, info.to_json())


def switch_latest(root: Path, name: str) -> Optional[str]:
    """Makes version ``name`` current (atomically); returns what ``LATEST`` named before."""
    previous = fs.pointer_name(root)
    fs.write_latest(root, name)
    return previous


def prune_versions(root: Path, name: str, keep: int, previous: Optional[str]) -> None:
    """Keeps ``name``, ``previous`` and the newest complete versions up to ``keep`` in all;
    removes the others, incomplete leftovers and hidden temporaries."""
    fs.prune(root, name, keep, complete, previous)


def list_versions(root: Path) -> List[Tuple[str, Optional[Info], str]]:
    """Every version folder of ``root``, oldest first: ``(name, its info or None, why
    it is not complete or "")`` (``info.json`` is read and checked, no digest)."""
    if not root.is_dir():
        raise CheckpointError(f"checkpoint {root} is not a folder")
    found = []
    for folder in fs.versions(root):
        try:
            found.append((folder.name, Info.read(folder / INFO), ""))
        except CheckpointError as exc:
            found.append((folder.name, None, str(exc)))
    return found


def _help(root: Path) -> str:
    """The complete versions of ``root`` and how to resume from one (for messages)."""
    done = [(name, info) for name, info, _ in list_versions(root) if info is not None]
    if not done:
        return (f"no complete version is left in {root}: start from scratch (remove "
                f"{root / fs.LATEST}, or the folder)")
    listed = ", ".join(f"{name} (step {info.step})" for name, info in reversed(done))
    newest = done[-1][0]
    return (f"complete versions, newest first: {listed}; resume from one with "
            f"checkpoint.load('{root}', state, version='{newest}') or make it current "
            f"with: pyg-dist-checkpoint use {root} {newest}")


def current(root: Path) -> Optional[str]:
    """The version ``LATEST`` names (``None`` when there is no checkpoint yet).

    Raises:
        CheckpointError: naming ``root`` or ``LATEST`` when ``root`` is not a folder, or
            ``LATEST`` is not a regular file naming a complete version (then listing the
            complete versions and how to resume from one).
    """
    try:
        return fs.read_latest(root, complete)
    except fs.PointerError as exc:
        if root.is_dir() and fs.pointer_name(root) is not None:
            raise CheckpointError(f"checkpoint: {exc}; {_help(root)}") from None
        raise CheckpointError(f"checkpoint: {exc}") from None


def choose(root: Path, version: Optional[str]) -> Optional[str]:
    """The version to load: ``version`` when given (it must be a complete version of
    ``root``), else the current one (see :func:`current`)."""
    if version is None:
        return current(root)
    if not isinstance(version, str):
        raise TypeError(f"version must be a version name (str) or None, got "
                        f"{type(version).__name__}")
    if not fs.VERSION_NAME.fullmatch(version):
        raise ValueError(f"version {version[:80]!r} is not a version name "
                         f"(step<digits>-<8 hex>)")
    if not (root / version).is_dir() or (root / version).is_symlink() \
            or not complete(root / version):
        raise CheckpointError(f"checkpoint: {version!r} is not a complete version in {root}; "
                              f"{_help(root)}")
    return version


def verify_version(root: Path, name: str) -> Info:
    """Reads version ``name``'s ``info.json`` and checks every file it records against
    its digest, that no file is missing from the record, and the DCP metadata; raises
    :class:`CheckpointError` naming the first problem."""
    folder = root / choose(root, name)
    info = Info.read(folder / INFO)
    unrecorded = sorted(set(version_files(folder)) - set(info.digests))
    if unrecorded:
        raise CheckpointError(f"{folder}: files not recorded in {INFO}: {unrecorded[:5]}")
    verify_files(folder, info.digests, sorted(info.digests))
    if (folder / MODEL).exists():
        check_dense(folder / MODEL)
    return info


def use(root: Path, name: str) -> Info:
    """Verifies version ``name`` and makes it current (atomically repoints ``LATEST``).

    Raises:
        CheckpointError: naming the problem when ``name`` is not a complete, intact
            version of ``root`` (``LATEST`` is then left as it was).
    """
    info = verify_version(root, name)
    fs.write_latest(root, name)
    if not complete(root / name):  # removed meanwhile by a concurrent prune
        raise CheckpointError(f"checkpoint: {root / name} was removed while LATEST was "
                              f"switched to it")
    return info
