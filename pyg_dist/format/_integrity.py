"""Checking a whole partition folder: every file's digest, content and META consistency.

:func:`verify_folder` is what ``pyg-dist-verify DIR`` runs. For every partition
``p < num_parts`` of ``META.json`` it checks that ``part_<p>/`` is complete, that its
``MANIFEST.json`` belongs to this partition and partitioning, that every file has the
size and digest recorded when it was written, and that every file's content agrees
with ``META.json`` (the checks of :mod:`pyg_dist.format._validate`, including every
source id, and of :mod:`pyg_dist.format._id_maps`), and that every original node and
edge id of a type is held exactly once, by one partition. It reads every byte once for
the digest and maps the files for the content checks, so it never holds more than the
largest tensor of one file, plus one bit per node (edge) of the type whose ids it
checks. Each problem is one line naming the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

from pyg_dist.format import _partition_io as io, _validate as validate
from pyg_dist.format._id_maps import read_part_ids
from pyg_dist.format._part_manifest import MANIFEST_FILE, PartManifest, read_manifest
from pyg_dist.format._meta import PartitionFormatError, PartitionMeta

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
    for kind in ("node", "edge"):
        _check_unique_ids(root, meta, kind, report)
    return report


def _id_file(root: Path, meta: PartitionMeta, part: int, kind: str) -> Path:
    """The file holding partition ``part``'s original ``kind`` ids."""
    if meta.version < 2:  # version 1: one map for the whole graph at the root
        return root / (io.NODE_MAP_FILE if kind == "node" else io.EDGE_MAP_FILE)
    return io.part_dir(root, part) / (io.NODE_IDS_FILE if kind == "node" else io.EDGE_IDS_FILE)


def _check_unique_ids(root: Path, meta: PartitionMeta, kind: str,
                      report: VerifyReport) -> None:
    """Every original ``kind`` id of a type must be held once: not twice by one file,
    not by two partitions (one bit per id of the type marks those seen)."""
    types = meta.node_types if kind == "node" else meta.edge_types
    totals = meta.num_nodes if kind == "node" else meta.num_edges
    for group in types:
        seen = np.zeros((totals[group] + 7) // 8, dtype=np.uint8)
        for part in range(meta.num_parts):
            try:  # ranges and counts are checked (and reported) by the content checks
                ids = read_part_ids(root, meta, part, kind)[group].numpy()
            except (PartitionFormatError, OSError):
                continue
            problem = _mark_ids(ids, seen)
            if problem:
                path = _id_file(root, meta, part, kind)
                report.problems.append(f"{path}: {problem} ({kind} type {group!r}): original "
                                       f"ids must be unique across the partitioning")


def _mark_ids(ids: np.ndarray, seen: np.ndarray) -> str:
    """Marks ``ids`` (in range) in the bitmap ``seen``; what is wrong with them, or ''."""
    unique, counts = np.unique(ids, return_counts=True)
    if unique.size == 0:
        return ""
    if unique.size < ids.size:
        return f"holds original id {int(unique[np.argmax(counts > 1)])} more than once"
    byte, bit = unique >> 3, np.left_shift(1, unique & 7).astype(np.uint8)
    again = np.flatnonzero(seen[byte] & bit)
    if again.size:
        return f"holds original id {int(unique[again[0]])}, held by another partition too"
    starts = np.flatnonzero(np.r_[True, byte[1:] != byte[:-1]])
    seen[byte[starts]] |= np.bitwise_or.reduceat(bit, starts)
    return ""


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
