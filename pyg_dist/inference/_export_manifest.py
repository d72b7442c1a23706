"""The export format: ``DIR/manifest.json`` and its ``.npy`` file pairs, and its reader.

Contract (other tools read it; change it only with a version bump)::

    DIR/manifest.json = {"format": "pyg_dist-export", "version": 1,
                         "node_types": {TYPE: [{"ids": REL, "values": REL}, ...]}}

Each ``ids`` file is a ``.npy`` of int64 original node ids and its ``values`` file a
``.npy`` float32 ``[len(ids), dim]``; one pair per partition; paths are relative to
``DIR``. Homogeneous graphs use the node type ``"_N"`` (the partition format's name).
An entry may also name a ``"parquet"`` file beside the pair (``export(format=
"parquet")``): the same rows as columns ``id`` (int64) and ``values`` (fixed-size lists
of float32), for pandas/Spark; readers that only know the pair ignore it.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterator, List, Tuple, Union

import numpy as np

from pyg_dist.errors import PygDistError
from pyg_dist.format._jsonio import read_json

FORMAT = "pyg_dist-export"
VERSION = 1
MANIFEST = "manifest.json"

PathLike = Union[str, Path]


class ExportFormatError(ValueError, PygDistError):
    """An export folder is not as the manifest contract says (names the file)."""


def manifest(entries: Dict[str, List[Dict[str, str]]]) -> Dict[str, Any]:
    """The manifest object listing ``entries`` (node type -> file pairs)."""
    return {"format": FORMAT, "version": VERSION, "node_types": entries}


def pair_paths(node_type: str, part: int, parquet: bool = False) -> Dict[str, str]:
    """Relative paths of partition ``part``'s file pair of ``node_type`` (and its parquet
    file if ``parquet``)."""
    folder = "".join(c if c.isalnum() or c in "_-." else "_" for c in node_type)
    paths = {"ids": f"{folder}/part_{part}.ids.npy",
             "values": f"{folder}/part_{part}.values.npy"}
    if parquet:
        paths["parquet"] = f"{folder}/part_{part}.parquet"
    return paths


def require_pyarrow() -> None:
    """Raises ImportError with the install hint when pyarrow is missing."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError("parquet export needs pyarrow: pip install 'pyg_dist[parquet]'") \
            from None


def write_parquet(path: Path, ids_path: Path, values_path: Path, chunk: int) -> None:
    """Writes a pair's rows as a parquet file (one row group per ``chunk`` rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = np.load(ids_path, mmap_mode="r")
    values = np.load(values_path, mmap_mode="r")
    dim = int(values.shape[1])
    schema = pa.schema([("id", pa.int64()), ("values", pa.list_(pa.float32(), dim))])
    with pq.ParquetWriter(str(path), schema) as writer:
        for lo in range(0, max(ids.shape[0], 1), chunk):
            flat = pa.array(np.ascontiguousarray(values[lo:lo + chunk]).reshape(-1))
            column = pa.FixedSizeListArray.from_arrays(flat, dim)
            writer.write_table(pa.table([pa.array(np.asarray(ids[lo:lo + chunk])), column],
                                        schema=schema))


def read_manifest(root: PathLike) -> Dict[str, List[Tuple[Path, Path]]]:
    """The checked file pairs of the export folder ``root``, by node type.

    Raises:
        ExportFormatError: naming the file and the problem.
    """
    root = Path(root)
    path = root / MANIFEST
    if not path.is_file():
        raise ExportFormatError(f"{path} is missing: {root} is not a pyg_dist export")
    if not path.resolve().is_relative_to(root.resolve()):
        raise ExportFormatError(f"{path} is a link to {path.resolve()}, outside {root}: an "
                                f"export's manifest must be inside its folder")
    obj = read_json(path, ExportFormatError)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ExportFormatError(f"{path}: 'format' must be {FORMAT!r}")
    if obj.get("version") != VERSION:
        raise ExportFormatError(f"{path}: version {obj.get('version')!r} is not supported "
                                f"(this reader knows version {VERSION})")
    types = obj.get("node_types")
    if not isinstance(types, dict) or set(obj) != {"format", "version", "node_types"}:
        raise ExportFormatError(f"{path}: expected exactly the keys format, version and "
                                f"node_types (a dict of node type -> file pairs)")
    return {str(t): [_pair(root, path, t, i, e) for i, e in enumerate(_list(path, t, pairs))]
            for t, pairs in types.items()}


def _list(path: Path, node_type: str, pairs: Any) -> list:
    if not isinstance(pairs, list):
        raise ExportFormatError(f"{path}: node_types[{node_type!r}] must be a list of "
                                f"{{'ids': ..., 'values': ...}} entries")
    return pairs


def _pair(root: Path, path: Path, node_type: str, i: int, entry: Any) -> Tuple[Path, Path]:
    where = f"{path}: node_types[{node_type!r}][{i}]"
    if not isinstance(entry, dict) or set(entry) - {"parquet"} != {"ids", "values"}:
        raise ExportFormatError(f"{where} must have exactly the keys 'ids' and 'values' "
                                f"(and optionally 'parquet')")
    if "parquet" in entry:
        _inside(root, entry["parquet"], where)
    return _inside(root, entry["ids"], where), _inside(root, entry["values"], where)


def _inside(root: Path, rel: Any, where: str) -> Path:
    """``root / rel`` after checking it is a relative path that stays inside ``root``."""
    if not isinstance(rel, str) or not rel:
        raise ExportFormatError(f"{where}: a path must be a non-empty string, got {rel!r}")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or "\\" in rel:
        raise ExportFormatError(f"{where}: path {rel!r} must be relative and stay inside "
                                f"the export folder")
    full = (root / pure).resolve()
    if not full.is_relative_to(root.resolve()):
        raise ExportFormatError(f"{where}: path {rel!r} leaves the export folder (a link?)")
    return full


def iter_export(root: PathLike) -> Iterator[Tuple[str, np.ndarray, np.ndarray]]:
    """``(node_type, ids, values)`` of every checked file pair (arrays mapped read-only)."""
    for node_type, pairs in read_manifest(root).items():
        dim = None
        for ids_path, values_path in pairs:
            ids = _load(ids_path, np.int64, 1)
            values = _load(values_path, np.float32, 2)
            if values.shape[0] != ids.shape[0]:
                raise ExportFormatError(f"{values_path}: {values.shape[0]} rows but "
                                        f"{ids_path} holds {ids.shape[0]} ids")
            if dim is not None and values.shape[1] != dim:
                raise ExportFormatError(f"{values_path}: rows of width {values.shape[1]}, "
                                        f"other files of {node_type!r} have width {dim}")
            dim = values.shape[1]
            yield node_type, ids, values


def _load(path: Path, dtype: type, ndim: int) -> np.ndarray:
    if not path.is_file():
        raise ExportFormatError(f"export file {path} is missing")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ExportFormatError(f"export file {path} is not a plain .npy array: {exc}") from None
    if array.dtype != np.dtype(dtype) or array.ndim != ndim:
        raise ExportFormatError(f"export file {path} must be a {ndim}-D "
                                f"{np.dtype(dtype).name} array, got {array.ndim}-D {array.dtype}")
    return array


def read_export(root: PathLike) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Every node type's ``(ids, values)`` of the export folder ``root``, concatenated
    over its files (holds them in memory: for tools and tests; large exports read the
    pairs one at a time with :func:`iter_export`).

    Raises:
        ExportFormatError: naming the file, on a malformed manifest or file, or an id
            listed twice.
    """
    parts: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {}
    for node_type, ids, values in iter_export(root):
        parts.setdefault(node_type, []).append((np.asarray(ids), np.asarray(values)))
    out = {}
    for node_type, pairs in parts.items():
        ids = np.concatenate([p[0] for p in pairs])
        if np.unique(ids).size != ids.size:
            raise ExportFormatError(f"{Path(root) / MANIFEST}: node type {node_type!r} lists "
                                    f"some node id more than once")
        out[node_type] = (ids, np.concatenate([p[1] for p in pairs]))
    return out
