"""Checking a whole partition folder: every file's digest, content and META consistency.

:func:`verify_folder` is what ``pyg-dist-verify DIR`` runs. For every partition
``p < num_parts`` of ``META.json`` it checks that ``part_<p>/`` is complete, that its
``MANIFEST.json`` belongs to this partition and partitioning, that every file has the
size and digest recorded when it was written, and that every file's content agrees
with ``META.json`` (the checks of :mod:`pyg_dist.format.validate`, including every
source id, and of :mod:`pyg_dist.format.id_maps`). It reads every byte once for the
digest and maps the files for the content checks, so it never holds more than the
largest tensor of one file. Each problem is one line naming the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from pyg_dist.format import io, validate
from pyg_dist.format.id_maps import read_part_ids
from pyg_dist.format.manifest import MANIFEST_FILE, PartManifest, read_manifest
from pyg_dist.format.meta import PartitionFormatError, PartitionMeta

__all__ = ["VerifyReport", "verify_folder"]

_CONTENT: Dict[str, Callable] = {
    io.NODE_FEATS_FILE: validate.check_node_feats,
    io.EDGE_FEATS_FILE: validate.check_edge_feats,
    io.SPLITS_FILE: validate.check_splits,
}


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_folder`.

    Args:
        problems (List[str]): one line per problem, naming the file.
        files (int): files whose digest matched.
        unrecorded (List[int]): partitions written before digests (content checked only).
    """
    problems: List[str] = field(default_factory=list)
    files: int = 0
    unrecorded: List[int] = field(default_factory=list)


def verify_folder(root: io.PathLike) -> VerifyReport:
    """Checks every file of every partition of ``root``.

    Raises:
        FileNotFoundError, NotADirectoryError, PartitionFormatError: ``root`` is not a
            partition folder (no ``META.json``): nothing to verify.
    """
    root = io.check_root(root)
    report = VerifyReport()
    try:
        meta = io.read_meta(root)
    except (PartitionFormatError, OSError, UnicodeDecodeError) as exc:
        report.problems.append(_line(exc, root / io.META_FILE))
        return report
    for part in range(meta.num_parts):
        _verify_part(root, meta, part, report)
    return report


def _line(exc: BaseException, path: Path) -> str:
    """One line naming the file (the library's messages already start with it)."""
    text = " ".join(str(exc).split())
    return text if str(path) in text else f"{path}: {text}"


def _verify_part(root: Path, meta: PartitionMeta, part: int, report: VerifyReport) -> None:
    folder = io.part_dir(root, part)
    if not folder.is_dir():
        report.problems.append(f"{folder}: partition folder is missing")
        return
    manifest: Optional[PartManifest] = None
    try:
        manifest = read_manifest(folder, meta, part)
    except PartitionFormatError as exc:
        report.problems.append(_line(exc, folder / MANIFEST_FILE))
    if manifest is None and not meta.digests:
        report.unrecorded.append(part)
    names = io.PART_FILES + (io.ID_FILES if meta.version >= 2 else ())
    for name in names:
        path = folder / name
        if not path.is_file():
            report.problems.append(f"{path}: missing")
            continue
        try:
            if manifest is not None:
                manifest.check(folder, (name,), (name,))
                report.files += 1
        except (PartitionFormatError, OSError) as exc:
            report.problems.append(_line(exc, path))
        try:
            _check_content(root, meta, part, name)
        except (PartitionFormatError, OSError) as exc:
            report.problems.append(_line(exc, path))
    if meta.version < 2:  # version 1: the id maps live at the root
        for kind in ("node", "edge"):
            try:
                read_part_ids(root, meta, part, kind)
            except (PartitionFormatError, OSError) as exc:
                report.problems.append(_line(exc, root))


def _check_content(root: Path, meta: PartitionMeta, part: int, name: str) -> None:
    """The content checks of one file (mapped, so pages are read once and dropped)."""
    path = io.part_dir(root, part) / name
    if name == io.GRAPH_FILE:
        validate.check_graph(io.load_pt(path, "graph file", mmap=True), meta, part, path)
    elif name in _CONTENT:
        _CONTENT[name](io.load_pt(path, "partition file", mmap=True), meta, part, path)
    else:
        read_part_ids(root, meta, part, "node" if name == io.NODE_IDS_FILE else "edge")
