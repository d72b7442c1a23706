"""Streaming reader of a chunked graph folder (DGL's chunked graph format).

:meth:`ChunkedGraph.open` parses ``metadata.json`` (chunk paths stay inside the folder
unless ``allow_external_paths``) and checks every chunk file that can be checked
cheaply before anything is read: each is a regular file; ``.npy`` headers against the
file's size and the counts in ``metadata.json``; parquet footers against the counts;
the edge counts of text chunks against the most lines their sizes can hold. The
iterators then read one chunk at a time and check what they read (rows per chunk, node ids within their
type's range), so nothing inconsistent is ever handed on and no step holds more than
one chunk. Errors are :class:`ChunkedFormatError` in one line naming the file.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from pyg_dist.chunked import _arrays as arrays
from pyg_dist.chunked._errors import ChunkedFormatError
from pyg_dist.chunked._metadata import ChunkedMeta, ChunkFiles, EdgeTypeSpec, NodeTypeSpec
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE

#: the canonical edge type string of a homogeneous graph (DGL's convention)
HOMO_EDGE_NAME = ":".join(HOMO_EDGE)
EdgeTypeLike = Union[str, Tuple[str, str, str], None]


@dataclass(frozen=True)
class DataArray:
    """One node or edge data array over its chunk files.

    Args:
        what (str): how errors name it, e.g. ``node data paper/feat``.
        files (ChunkFiles): its chunks.
        offsets (np.ndarray): ``offsets[i]`` is the first row of chunk ``i``;
            ``offsets[-1]`` the number of rows.
        row_bytes (int, optional): bytes per row, from the ``.npy`` headers (``None``
            for parquet: known once read).
    """
    what: str
    files: ChunkFiles
    offsets: np.ndarray
    row_bytes: Optional[int] = None


def _rows(path: Path, fmt: str) -> Tuple[int, Optional[Tuple[Tuple[int, ...], np.dtype]]]:
    """Rows of a data chunk and, for ``.npy``, its (row shape, dtype)."""
    if fmt == "numpy":
        shape, dtype = arrays.npy_header(path)
        if not shape:
            raise ChunkedFormatError(f"chunk file {path} holds a scalar, not rows")
        return shape[0], (shape[1:], dtype)
    return arrays.parquet_rows(path), None


def _read(path: Path, fmt: str) -> np.ndarray:
    return arrays.open_npy(path) if fmt == "numpy" else arrays.read_parquet(path)


def _tensor(array: np.ndarray, path: Path) -> Tensor:
    """A writable tensor copy of (part of) one chunk."""
    try:
        return torch.from_numpy(np.array(array, copy=True))
    except TypeError as exc:
        raise ChunkedFormatError(f"chunk file {path} holds {array.dtype} values, which "
                                 f"torch cannot hold: {exc}") from None


def _check_ids(ids: np.ndarray, column: int, bound: int, path: Path, node_type: str) -> None:
    values = ids[:, column]
    bad = np.flatnonzero((values < 0) | (values >= bound))
    if bad.size:  # the id itself is the file's content: not quoted
        end = "source" if column == 0 else "destination"
        raise ChunkedFormatError(f"edge chunk {path}: row {int(bad[0])} has a {end} id "
                                 f"outside [0, {bound}) of node type {node_type!r}")


class ChunkedGraph:
    """A chunked graph folder, opened and checked; its chunks are read one at a time.

    Build it with :meth:`open`. Homogeneous graphs use node type ``"_N"`` and edge
    type ``"_N:_E:_N"``; methods taking a type accept ``None`` for them.

    Example:
        >>> graph = ChunkedGraph.open("cora_chunked")
        >>> for src, dst in graph.iter_edge_chunks():
        ...     print(src.numel())
    """

    def __init__(self, meta: ChunkedMeta) -> None:
        self.meta = meta
        self._layouts: Dict[str, Tuple[Tuple[int, ...], np.dtype]] = {}
        self._node_data = {
            (t, name): self._data_array("node", t, name, files, meta.node_types[t].chunk_counts)
            for t, by_name in meta.node_data.items() for name, files in by_name.items()}
        self._edge_data = {
            (t, name): self._data_array("edge", t, name, files, meta.edge_types[t].chunk_counts)
            for t, by_name in meta.edge_data.items() for name, files in by_name.items()}
        for spec in meta.edge_types.values():
            self._check_edge_files(spec)

    @classmethod
    def open(cls, folder: Union[str, Path], allow_external_paths: bool = False
             ) -> "ChunkedGraph":
        """Reads ``folder/metadata.json`` and checks the chunk files it lists.

        Args:
            folder (str or Path): the folder holding ``metadata.json``.
            allow_external_paths (bool): also read chunk files given by absolute paths or
                paths resolving outside ``folder`` (DGL's format allows them; off by
                default, so a folder from elsewhere cannot make this process read other
                files).

        Raises:
            ChunkedFormatError: malformed metadata, a path leaving the folder, a chunk
                that is missing, not a regular file, or inconsistent with the counts.
            MissingDependencyError: parquet chunks without ``pyarrow`` installed.
        """
        return cls(ChunkedMeta.read(folder, allow_external_paths))

    # ---- what the graph holds ---------------------------------------------------------
    @property
    def is_hetero(self) -> bool:
        """``False`` for DGL's homogeneous convention (only ``_N`` and ``_N:_E:_N``)."""
        return not (list(self.meta.node_types) == [HOMO_NODE]
                    and list(self.meta.edge_types) in ([HOMO_EDGE_NAME], []))

    @property
    def node_types(self) -> Tuple[str, ...]:
        return tuple(self.meta.node_types)

    @property
    def edge_types(self) -> Tuple[str, ...]:
        """Canonical ``"src:rel:dst"`` strings, in ``metadata.json``'s order."""
        return tuple(self.meta.edge_types)

    def num_nodes(self, node_type: Optional[str] = None) -> int:
        return self._node_spec(node_type).num_nodes

    def num_edges(self, edge_type: EdgeTypeLike = None) -> int:
        return self._edge_spec(edge_type).num_edges

    def node_data_names(self, node_type: Optional[str] = None) -> Tuple[str, ...]:
        return tuple(self.meta.node_data.get(self._node_spec(node_type).name, {}))

    def edge_data_names(self, edge_type: EdgeTypeLike = None) -> Tuple[str, ...]:
        return tuple(self.meta.edge_data.get(self._edge_spec(edge_type).name, {}))

    # ---- streaming ----------------------------------------------------------------------
    def iter_edge_chunks(self, edge_type: EdgeTypeLike = None) -> Iterator[Tuple[Tensor, Tensor]]:
        """Yields ``(src, dst)`` int64 tensors, one pair per edge chunk, in order.

        Each chunk is checked before it is yielded: its row count against
        ``metadata.json`` and every id against the node count of its type.
        """
        spec = self._edge_spec(edge_type)
        total = 0
        for i in range(len(spec.files.files)):
            src, dst = self.read_edge_chunk(edge_type, i)
            total += src.shape[0]
            yield src, dst
        if total != spec.num_edges:
            raise ChunkedFormatError(f"the edge chunks of {spec.name} hold {total} edges "
                                     f"(last: {spec.files.files[-1]}), but metadata.json "
                                     f"says {spec.num_edges}")

    def num_edge_chunks(self, edge_type: EdgeTypeLike = None) -> int:
        """How many edge chunk files an edge type has."""
        return len(self._edge_spec(edge_type).files.files)

    def edge_chunk_rows(self, edge_type: EdgeTypeLike, i: int) -> int:
        """Edges in chunk ``i`` of an edge type: from ``metadata.json``, a ``.npy`` header
        or a parquet footer; text chunks without counts in ``metadata.json`` are read."""
        spec = self._edge_spec(edge_type)
        if spec.chunk_counts is not None:
            return int(spec.chunk_counts[i])
        path, fmt = spec.files.files[i], spec.files.format.name
        if fmt == "numpy":
            return int(arrays.npy_header(path)[0][0])
        if fmt == "parquet":
            return int(arrays.parquet_rows(path))
        return int(self._edge_ids(path, fmt, spec.files.format.delimiter).shape[0])

    def read_edge_chunk(self, edge_type: EdgeTypeLike, i: int) -> Tuple[Tensor, Tensor]:
        """``(src, dst)`` of edge chunk ``i`` alone, checked like :meth:`iter_edge_chunks`
        checks each chunk (its row count, every id against its type's node count)."""
        spec = self._edge_spec(edge_type)
        src_type, _, dst_type = spec.edge_type
        path = spec.files.files[i]
        ids = self._edge_ids(path, spec.files.format.name, spec.files.format.delimiter)
        expected = None if spec.chunk_counts is None else spec.chunk_counts[i]
        if expected is not None and ids.shape[0] != expected:
            raise ChunkedFormatError(f"edge chunk {path} has {ids.shape[0]} rows, but "
                                     f"num_edges_per_chunk of {spec.name} says {expected}")
        _check_ids(ids, 0, self.num_nodes(src_type), path, src_type)
        _check_ids(ids, 1, self.num_nodes(dst_type), path, dst_type)
        return torch.from_numpy(ids[:, 0].copy()), torch.from_numpy(ids[:, 1].copy())

    def iter_node_data(self, node_type: Optional[str], name: str) -> Iterator[Tensor]:
        """Yields node data ``name`` of ``node_type`` one chunk at a time."""
        yield from self._iter_data(self._node_array(node_type, name))

    def iter_edge_data(self, edge_type: EdgeTypeLike, name: str) -> Iterator[Tensor]:
        """Yields edge data ``name`` of ``edge_type`` one chunk at a time (rows are edge
        ids in the order of :meth:`iter_edge_chunks`)."""
        yield from self._iter_data(self._edge_array(edge_type, name))

    def read_rows(self, node_type: Optional[str], name: str, start: int, stop: int) -> Tensor:
        """Rows ``[start, stop)`` of node data ``name``, across chunk boundaries; only
        the chunks overlapping the range are touched (``.npy`` ones memory-mapped)."""
        return self._read_range(self._node_array(node_type, name), start, stop)

    def read_edge_rows(self, edge_type: EdgeTypeLike, name: str, start: int, stop: int
                       ) -> Tensor:
        """Rows ``[start, stop)`` of edge data ``name`` (see :meth:`read_rows`)."""
        return self._read_range(self._edge_array(edge_type, name), start, stop)

    def data_bytes(self) -> int:
        """Bytes of every node and edge data array whose rows have a known size (``.npy``
        chunks; parquet ones count 0 until read): what assembling them in memory holds."""
        arrays_ = [*self._node_data.values(), *self._edge_data.values()]
        return sum(int(a.offsets[-1]) * (a.row_bytes or 0) for a in arrays_)

    def validate(self) -> None:
        """Reads every edge chunk once (bounded memory), checking counts and id ranges;
        data chunks were checked by :meth:`open` (``.npy``) or are checked when read."""
        for name in self.edge_types:
            for _ in self.iter_edge_chunks(name):
                pass

    # ---- internals ----------------------------------------------------------------------
    def _node_spec(self, node_type: Optional[str]) -> NodeTypeSpec:
        name = HOMO_NODE if node_type is None else node_type
        if name not in self.meta.node_types:
            raise KeyError(f"unknown node type {name!r} (node types: {list(self.node_types)})")
        return self.meta.node_types[name]

    def _edge_spec(self, edge_type: EdgeTypeLike) -> EdgeTypeSpec:
        name = HOMO_EDGE_NAME if edge_type is None else (
            edge_type if isinstance(edge_type, str) else ":".join(edge_type))
        if name not in self.meta.edge_types:
            raise KeyError(f"unknown edge type {name!r} (edge types: {list(self.edge_types)})")
        return self.meta.edge_types[name]

    def _node_array(self, node_type: Optional[str], name: str) -> DataArray:
        key = (self._node_spec(node_type).name, name)
        if key not in self._node_data:
            raise KeyError(f"node type {key[0]!r} has no data {name!r} "
                           f"(it has: {list(self.node_data_names(key[0]))})")
        return self._node_data[key]

    def _edge_array(self, edge_type: EdgeTypeLike, name: str) -> DataArray:
        key = (self._edge_spec(edge_type).name, name)
        if key not in self._edge_data:
            raise KeyError(f"edge type {key[0]!r} has no data {name!r} "
                           f"(it has: {list(self.edge_data_names(key[0]))})")
        return self._edge_data[key]

    def _data_array(self, kind: str, type_name: str, name: str, files: ChunkFiles,
                    chunk_counts: Optional[Tuple[int, ...]]) -> DataArray:
        """Row offsets of a data array, checked against its type's counts.

        Data chunks may be split independently of the node/edge chunks (DGL allows
        it); only their total must match. When it does not and the files pair up with
        the type's chunks, the first file whose rows differ is named.
        """
        what = f"{kind} data {type_name}/{name}"
        rows, first = [], None
        for path in files.files:
            count, layout = _rows(path, files.format.name)
            first = layout if first is None else first
            if layout is not None and layout != first:
                raise ChunkedFormatError(f"{what} chunk {path} holds rows of shape "
                                         f"{layout[0]} {layout[1]}, but its first chunk "
                                         f"{first[0]} {first[1]}")
            rows.append(count)
        expected = self.meta.node_types[type_name].num_nodes if kind == "node" else \
            self.meta.edge_types[type_name].num_edges
        if sum(rows) != expected:
            if chunk_counts is not None and len(chunk_counts) == len(rows):
                i = next(i for i, (a, b) in enumerate(zip(rows, chunk_counts)) if a != b)
                raise ChunkedFormatError(f"{what} chunk {files.files[i]} has {rows[i]} rows, "
                                         f"expected {chunk_counts[i]} (num_{kind}s_per_chunk "
                                         f"of {type_name!r})")
            raise ChunkedFormatError(f"{what} has {sum(rows)} rows in its chunks (last: "
                                     f"{files.files[-1]}), expected {expected} (one per "
                                     f"{kind} of type {type_name!r})")
        row_bytes = None if first is None else \
            math.prod(first[0]) * first[1].itemsize
        return DataArray(what, files, np.concatenate([[0], np.cumsum(rows)]).astype(np.int64),
                         row_bytes)

    def _check_edge_files(self, spec: EdgeTypeSpec) -> None:
        fmt = spec.files.format.name
        if fmt == "csv":
            self._check_text_counts(spec)
        for i, path in enumerate(spec.files.files):
            arrays.check_file(path)
            if fmt == "csv":
                continue  # counted when read
            if fmt == "numpy":
                shape, dtype = arrays.npy_header(path)
                if len(shape) != 2 or shape[1] != 2 or dtype.kind not in "iu":
                    raise ChunkedFormatError(f"edge chunk {path} holds {dtype} values of "
                                             f"shape {shape}, expected integers of shape "
                                             f"[E, 2]")
                count = shape[0]
            else:
                count = arrays.parquet_rows(path)
            if spec.chunk_counts is not None and count != spec.chunk_counts[i]:
                raise ChunkedFormatError(f"edge chunk {path} has {count} rows, but "
                                         f"num_edges_per_chunk of {spec.name} says "
                                         f"{spec.chunk_counts[i]}")

    @staticmethod
    def _check_text_counts(spec: EdgeTypeSpec) -> None:
        """The edge counts of text chunks against the most lines their sizes allow, so a
        forged count fails before anything is sized by it."""
        most = [arrays.max_text_edges(path) for path in spec.files.files]
        for i, count in enumerate(spec.chunk_counts or ()):
            if count > most[i]:
                raise ChunkedFormatError(
                    f"edge chunk {spec.files.files[i]} can hold at most {most[i]} edges "
                    f"(its size allows no more lines), but num_edges_per_chunk of "
                    f"{spec.name} says {count}")
        if spec.num_edges > sum(most):
            raise ChunkedFormatError(
                f"the edge chunks of {spec.name} can hold at most {sum(most)} edges (last: "
                f"{spec.files.files[-1]}; their sizes allow no more lines), but "
                f"metadata.json says {spec.num_edges}")

    @staticmethod
    def _edge_ids(path: Path, fmt: str, delimiter: str) -> np.ndarray:
        if fmt == "csv":
            return arrays.read_csv_ids(path, delimiter)
        ids = arrays.open_npy(path) if fmt == "numpy" else arrays.read_parquet_ids(path)
        if ids.dtype.kind not in "iu":
            raise ChunkedFormatError(f"edge chunk {path} holds {ids.dtype} values, "
                                     f"expected integer node ids")
        return np.asarray(ids, dtype=np.int64)

    def _chunk(self, array: DataArray, i: int) -> np.ndarray:
        path = array.files.files[i]
        data = _read(path, array.files.format.name)
        rows = int(array.offsets[i + 1] - array.offsets[i])
        if data.ndim == 0 or data.shape[0] != rows:
            raise ChunkedFormatError(f"{array.what} chunk {path} changed while being read "
                                     f"({data.shape[0] if data.ndim else 0} rows, "
                                     f"expected {rows})")
        layout = (data.shape[1:], data.dtype)  # parquet has no header to check at open()
        seen = self._layouts.setdefault(array.what, layout)
        if layout != seen:
            raise ChunkedFormatError(f"{array.what} chunk {path} holds rows of shape "
                                     f"{layout[0]} {layout[1]}, but its other chunks "
                                     f"{seen[0]} {seen[1]}")
        return data

    def _iter_data(self, array: DataArray) -> Iterator[Tensor]:
        for i, path in enumerate(array.files.files):
            yield _tensor(self._chunk(array, i), path)

    def _read_range(self, array: DataArray, start: int, stop: int) -> Tensor:
        total = int(array.offsets[-1])
        if not 0 <= start <= stop <= total:
            raise IndexError(f"rows [{start}, {stop}) are outside [0, {total}) of "
                             f"{array.what}")
        first = int(np.searchsorted(array.offsets, start, side="right")) - 1
        pieces: List[Tensor] = []
        i = max(first, 0)
        while i < len(array.files.files) and array.offsets[i] < stop:
            lo = max(start - int(array.offsets[i]), 0)
            hi = min(stop, int(array.offsets[i + 1])) - int(array.offsets[i])
            pieces.append(_tensor(self._chunk(array, i)[lo:hi], array.files.files[i]))
            i += 1
        if not pieces:  # an empty range: keep the row shape and dtype
            return _tensor(self._chunk(array, min(first, len(array.files.files) - 1))[:0],
                           array.files.files[0])
        return torch.cat(pieces) if len(pieces) > 1 else pieces[0]
