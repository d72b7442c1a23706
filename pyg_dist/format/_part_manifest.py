"""``part_<p>/MANIFEST.json``: the size and content digest of every file of a partition.

Every writer of partition folders (:class:`~pyg_dist.partition.Partitioner`, the
out-of-core and the multi-machine partitioners, ``pyg-dist-convert``) records, when it
writes ``part_<p>/``, one entry per file::

    {"format": "pyg_dist-manifest", "version": 1, "part": 0, "uid": "<META's uid>",
     "files": {"graph.pt": {"size": 91234, "digest": "blake2b-128:<32 hex>"}, ...}}

and ``META.json`` says so with ``"digests": "blake2b-128"``, so that a manifest removed
later is noticed. Folders written before digests existed (version 1, and version 2
without ``digests``) carry none and load as before, unchecked.

Checks (:func:`check_files`): a file's size is compared with its entry whenever it is
opened (one ``stat``, constant time); its digest (:mod:`pyg_dist.format._digest`,
every byte read) where the reader reads every byte anyway (private loads) or on demand
(``verify=True``, ``pyg-dist-verify``). A digest guards against bit rot, partial copies
and edits in place; it is not a signature (whoever can rewrite a file can rewrite its
manifest), and ``uid`` remains the partitioning's identity.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Union

from pyg_dist.format._jsonio import read_json
from pyg_dist.format._digest import ALGORITHM, DigestMismatch, check_file, file_digest
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.format._schema import Field, PartitionFormatError

MANIFEST_FILE = "MANIFEST.json"
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
FORMAT = "pyg_dist-manifest"
VERSION = 1

__all__ = ["MANIFEST_FILE", "FileEntry", "PartManifest", "PartitionDigestError", "entry_of",
           "read_manifest", "check_files"]


class PartitionDigestError(PartitionFormatError, DigestMismatch):
    """A partition file's bytes differ from the digest recorded when it was written
    (both a :class:`PartitionFormatError` and a :class:`DigestMismatch`)."""


@dataclass(frozen=True)
class FileEntry:
    """What was written: the file's size in bytes and its digest."""
    size: int
    digest: str

    def to_json(self) -> Dict[str, Any]:
        return {"size": self.size, "digest": self.digest}


def entry_of(path: Union[str, os.PathLike]) -> FileEntry:
    """The :class:`FileEntry` of the file at ``path`` as it is now (reads every byte)."""
    return FileEntry(os.stat(path).st_size, file_digest(path))


@dataclass(frozen=True)
class PartManifest:
    """The manifest of one partition folder.

    Args:
        part (int): the partition.
        uid (str): the partitioning's uid (``""`` if it has none).
        files (Dict[str, FileEntry]): file name -> entry.
    """
    part: int
    uid: str
    files: Dict[str, FileEntry]

    def to_json(self) -> Dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "part": self.part, "uid": self.uid,
                "files": {name: e.to_json() for name, e in sorted(self.files.items())}}

    def check(self, folder: Path, names: Iterable[str], full: Iterable[str] = ()) -> None:
        """Checks the sizes of files ``names`` of ``folder`` and the digests of ``full``.

        Raises:
            PartitionFormatError: a file is not listed or has another size.
            PartitionDigestError: a file's bytes differ from its digest; names the file.
        """
        full = set(full)
        for name in dict.fromkeys([*names, *sorted(full)]):
            path = Path(folder) / name
            entry = self.files.get(name)
            if entry is None:
                raise PartitionFormatError(f"{path} is not listed in {folder / MANIFEST_FILE}")
            size = path.stat().st_size
            if size != entry.size:
                raise PartitionFormatError(f"{path}: {size} bytes, but {entry.size} were "
                                           f"written ({MANIFEST_FILE}): the file is truncated, "
                                           f"extended or replaced")
            if name in full:
                try:
                    check_file(path, entry.digest)
                except DigestMismatch as exc:
                    raise PartitionDigestError(str(exc)) from None

    @classmethod
    def from_json(cls, obj: Any, source: str) -> "PartManifest":
        """Parses a manifest document; raises :class:`PartitionFormatError` naming the field."""
        doc = Field(obj, "", source)
        doc.as_dict()
        if obj.get("format") != FORMAT or obj.get("version") != VERSION:
            raise PartitionFormatError(f"{source}: not a {FORMAT} version {VERSION} document "
                                       f"(format {obj.get('format')!r}, version "
                                       f"{obj.get('version')!r})")
        files = {}
        for name, item in doc["files"].as_dict().items():
            if not _NAME.fullmatch(name):
                item.fail("listed under a plain file name (no folders, no leading dot)")
            digest = item["digest"].as_str()
            if not digest.startswith(ALGORITHM + ":"):
                item["digest"].fail(f"a {ALGORITHM} digest")
            files[name] = FileEntry(item["size"].as_int(minimum=0), digest)
        return cls(doc["part"].as_int(minimum=0), doc["uid"].as_str(), files)


def read_manifest(folder: Path, meta: PartitionMeta, part: int) -> Optional[PartManifest]:
    """The checked manifest of ``folder`` (partition ``part``), ``None`` if the folder
    predates digests (``META.json`` records none and the folder has no manifest).

    Raises:
        PartitionFormatError: the manifest is missing although ``META.json`` records
            digests, is unreadable, or belongs to another partition or partitioning.
    """
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        if meta.digests:
            raise PartitionFormatError(f"{path} is missing, but META.json records digests "
                                       f"for every partition: the folder is incomplete")
        return None
    obj = read_json(path, PartitionFormatError)
    manifest = PartManifest.from_json(obj, str(path))
    uid = "" if meta.uid_derived else meta.uid
    if manifest.part != part or manifest.uid != uid:
        raise PartitionFormatError(
            f"{path}: describes partition {manifest.part} of uid {manifest.uid or 'none'}, "
            f"expected partition {part} of uid {uid or 'none'} (META.json): a manifest of "
            f"another folder or partitioning run was copied in")
    return manifest


def check_files(folder: Path, meta: PartitionMeta, part: int, names: Iterable[str],
                full: Iterable[str] = ()) -> Optional[PartManifest]:
    """Checks files of partition ``part`` against its manifest.

    Args:
        folder (Path): the partition folder ``part_<part>``.
        meta (PartitionMeta): the partitioning's META.
        part (int): the partition.
        names (Iterable[str]): files whose size is checked (constant time).
        full (Iterable[str]): files whose digest is checked too (every byte read).

    Returns:
        The manifest, or ``None`` for a folder written before digests (nothing checked).

    Raises:
        PartitionFormatError: a file is not listed or has another size.
        PartitionDigestError: a file's bytes differ from its digest; names the file.
    """
    manifest = read_manifest(folder, meta, part)
    if manifest is not None:
        manifest.check(folder, names, full)
    return manifest
