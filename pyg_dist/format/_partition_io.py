"""Paths and safe, atomic reading and writing of partition folders.

Every ``.pt`` file is written with plain tensors, dicts, lists, numbers and
strings, and read back with ``torch.load(..., weights_only=True)``, so a partition
folder from elsewhere cannot run code; :mod:`pyg_dist.format._validate` then checks
what was loaded. Every write goes through :mod:`pyg_dist.format._files` (temporary name,
``fsync``, rename); the hidden temporary folder of a killed run is removed by the next
write of the same output (:mod:`pyg_dist.format._leftovers`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterable, Tuple, Union

import torch

from pyg_dist.format import _files as files
from pyg_dist.format._jsonio import read_json
from pyg_dist.format._part_manifest import MANIFEST_FILE, PartManifest, entry_of
from pyg_dist.format._meta import PartitionFormatError, PartitionMeta

PathLike = Union[str, os.PathLike]

META_FILE = "META.json"
NODE_MAP_FILE = "node_map.pt"  # version 1: new -> original id of every node, at the root
EDGE_MAP_FILE = "edge_map.pt"  # version 1: likewise for edges
GRAPH_FILE = "graph.pt"
NODE_FEATS_FILE = "node_feats.pt"
EDGE_FEATS_FILE = "edge_feats.pt"
SPLITS_FILE = "splits.pt"
NODE_IDS_FILE = "node_ids.pt"  # version 2: original ids of the nodes a partition owns
EDGE_IDS_FILE = "edge_ids.pt"  # version 2: original ids of a partition's edges
PART_FILES = (GRAPH_FILE, NODE_FEATS_FILE, EDGE_FEATS_FILE, SPLITS_FILE)
ID_FILES = (NODE_IDS_FILE, EDGE_IDS_FILE)
INT32_MAX = 2**31 - 1  # id files hold int32 when every id is at most this


def part_dir(root: PathLike, part: int) -> Path:
    return Path(root) / f"part_{part}"


def write_part(root: PathLike, part: int, graph: dict, node_feats: dict, edge_feats: dict,
               splits: dict, node_ids: dict, edge_ids: dict, hetero: bool) -> None:
    """Writes the files of ``root/part_<part>/`` (format v2) and, last, its
    ``MANIFEST.json`` with the size and digest of each (:mod:`~pyg_dist.format._part_manifest`).
    ``node_ids``/``edge_ids`` are keyed by node type / ``"src__rel__dst"`` key;
    homogeneous graphs store the one tensor, each as :func:`narrow_ids` stores it.
    ``graph["uid"]`` goes into the manifest."""
    folder = part_dir(root, part)
    folder.mkdir()
    save_pt(graph, folder / GRAPH_FILE)
    save_pt(node_feats, folder / NODE_FEATS_FILE)
    save_pt(edge_feats, folder / EDGE_FEATS_FILE)
    save_pt(splits, folder / SPLITS_FILE)
    for ids, name in ((node_ids, NODE_IDS_FILE), (edge_ids, EDGE_IDS_FILE)):
        ids = {key: narrow_ids(value) for key, value in ids.items()}
        save_pt(ids if hetero else next(iter(ids.values())), folder / name)
    write_manifest(folder, part, graph.get("uid") or "", PART_FILES + ID_FILES)


def narrow_ids(ids: torch.Tensor) -> torch.Tensor:
    """Original ids as an id file stores them: int32 when every id fits (half the bytes
    every machine maps, and half the memory a sampler reads per drawn edge), else
    int64. Readers accept both (:mod:`pyg_dist.format._id_maps`)."""
    ids = torch.as_tensor(ids)
    if ids.dtype == torch.int64 and (ids.numel() == 0 or int(ids.max()) <= INT32_MAX):
        return ids.to(torch.int32)
    return ids


def write_manifest(folder: PathLike, part: int, uid: str, names: Iterable[str]) -> None:
    """Records the size and digest of the files ``names`` of ``folder`` (partition
    ``part`` of the partitioning ``uid``) in ``folder/MANIFEST.json``, atomically."""
    folder = Path(folder)
    entries = {name: entry_of(folder / name) for name in names}
    save_json(PartManifest(part, uid, entries).to_json(), folder / MANIFEST_FILE)


def save_pt(obj: Any, path: PathLike) -> None:
    """Writes ``obj`` with ``torch.save`` to a temporary name, then renames it.

    Equal content gives equal bytes, hence equal digests, in every run and from every
    writer: the file is written through a file object (torch then names the archive
    inside it ``archive``, not after the random temporary name), and ``obj`` in its
    :func:`canonical` form."""
    files.atomic_write(path, lambda handle: torch.save(canonical(obj), handle))


def canonical(obj: Any) -> Any:
    """``obj`` with dict keys sorted, strings interned (pickle writes a repeated string
    object once, so equal strings must be one object) and every tensor compact
    (contiguous, standard strides, holding exactly its own bytes: ``torch.save`` writes
    a view's whole storage); tensors already compact are not copied."""
    if isinstance(obj, str):
        return sys.intern(obj)
    if isinstance(obj, dict):
        return {canonical(k): canonical(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return type(obj)(canonical(v) for v in obj)
    if isinstance(obj, torch.Tensor):
        strides, step = [], 1
        for size in reversed(obj.shape):
            strides.append(step)
            step *= max(size, 1)
        compact = (obj.stride() == tuple(reversed(strides)) and obj.storage_offset() == 0
                   and obj.untyped_storage().nbytes() == obj.numel() * obj.element_size())
        return obj if compact else obj.clone(memory_format=torch.contiguous_format)
    return obj


def load_pt(path: PathLike, what: str = "partition file", mmap: bool = False) -> Any:
    """Loads a ``.pt`` file with ``weights_only=True``; names the file on failure.

    Args:
        path (str or Path): the file.
        what (str): what the file is (for error messages).
        mmap (bool): map tensors from the file instead of reading them (cheap when
            only a small entry is needed).
    """
    path = Path(path)
    if not path.is_file():
        raise PartitionFormatError(f"{what} {path} is missing")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # re-raised with the file named
        raise PartitionFormatError(f"{what} {path} cannot be loaded safely "
                                   f"(weights_only=True): {exc}") from exc


def read_uid(folder: PathLike) -> Any:
    """The ``uid`` entry of ``folder/graph.pt`` (``None`` if absent), read cheaply."""
    path = Path(folder) / GRAPH_FILE
    graph = load_pt(path, "graph file", mmap=True)
    if not isinstance(graph, dict):
        raise PartitionFormatError(f"{path}: graph.pt content must be a dict, "
                                   f"got {type(graph).__name__}")
    return graph.get("uid")


def save_json(obj: Any, path: PathLike) -> None:
    """Writes ``obj`` as JSON into ``path`` atomically (see
    :func:`~pyg_dist.format._files.write_json`)."""
    files.write_json(path, obj)


def check_root(root: PathLike) -> Path:
    """Returns ``root`` as a path if it is a partition folder, else raises."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        hint = f" ({root.parent})" if root.name == META_FILE else ""
        raise NotADirectoryError(f"partition folder {root} is a file, not a folder: pass "
                                 f"the folder that holds {META_FILE}{hint}")
    if not root.is_dir():
        raise FileNotFoundError(f"partition folder {root} does not exist")
    if not (root / META_FILE).is_file():
        raise PartitionFormatError(f"partition folder {root} has no {META_FILE}: "
                                   f"not a pyg_dist partition (run pyg-dist-partition first)")
    return root


def check_open_args(root: Any, pid: Any, **flags: Any) -> Tuple[Path, int]:
    """Checks the arguments of a ``from_partition(root, pid, ...)`` call.

    Args:
        root: the partition folder (``str`` or path-like).
        pid: the partition id (an integer; numpy integers too, not ``bool``).
        **flags: boolean options by name (``mmap=...``, ``verify=...``).

    Returns:
        ``(Path(root), int(pid))``.

    Raises:
        TypeError: naming the argument, what it is and what is expected.
    """
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be the partition folder (a str or path), got "
                        f"{type(root).__name__} {root!r}")
    if isinstance(pid, bool) or not hasattr(pid, "__index__"):
        raise TypeError(f"pid must be an integer partition id, got {type(pid).__name__} "
                        f"{pid!r}")
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {type(value).__name__} "
                            f"{value!r}")
    return Path(root), pid.__index__()


def read_meta(root: PathLike) -> PartitionMeta:
    """Reads and validates ``root/META.json``."""
    path = check_root(root) / META_FILE
    obj = read_json(path, PartitionFormatError)
    return PartitionMeta.from_json(obj, source=str(path))


def id_files(meta: PartitionMeta) -> Tuple[str, ...]:
    """The files of each partition holding its original ids (none before version 2,
    whose maps are whole-graph files in the root)."""
    return ID_FILES if meta.version >= 2 else ()


def check_part(root: PathLike, meta: PartitionMeta, part: int) -> Path:
    """Returns the folder of partition ``part`` after checking it is complete."""
    if not 0 <= part < meta.num_parts:
        raise ValueError(f"partition id {part} is out of range: {root} has "
                         f"{meta.num_parts} partition(s)")
    folder = part_dir(root, part)
    if not folder.is_dir():
        raise PartitionFormatError(f"partition folder {folder} is missing")
    files = PART_FILES + id_files(meta)
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise PartitionFormatError(f"partition folder {folder} is missing {', '.join(missing)}")
    return folder
