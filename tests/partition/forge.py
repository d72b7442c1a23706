"""Test helpers that edit partition folders the way a forger or an old writer would.

Tests of what readers refuse forge a file's *content*; since folders record a digest
per file (``part_<p>/MANIFEST.json``), a forged file alone is now refused for its
digest before its content is looked at. :func:`forge` therefore rewrites the manifest
too (as a forger can: a digest is not a signature), so the content check under test
still runs; :func:`strip_digests` turns a folder into one written before digests.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from pyg_dist.format import _partition_io as io
from pyg_dist.format._part_manifest import MANIFEST_FILE


def reseal(folder: Path) -> None:
    """Rewrites ``folder/MANIFEST.json`` so that it matches the files as they are now."""
    doc = json.loads((folder / MANIFEST_FILE).read_text())
    names = [n for n in doc["files"] if (folder / n).is_file()]
    io.write_manifest(folder, doc["part"], doc["uid"], names)


def forge(path: Path, obj: Any) -> None:
    """Replaces the partition file ``path`` by ``torch.save(obj)`` and reseals its folder."""
    torch.save(obj, path)
    reseal(path.parent)


def strip_digests(root: Path) -> None:
    """Makes ``root`` a folder written before digests: no manifests, no META ``digests``."""
    meta = json.loads((root / io.META_FILE).read_text())
    meta.pop("digests", None)
    (root / io.META_FILE).write_text(json.dumps(meta, indent=1))
    for manifest in root.glob(f"part_*/{MANIFEST_FILE}"):
        manifest.unlink()
