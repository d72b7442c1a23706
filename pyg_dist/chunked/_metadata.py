"""``metadata.json`` of DGL's chunked graph format, parsed into dataclasses and checked.

The format (DGL user guide 7.1, "chunked graph format") describes a graph stored as
many files ("chunks") that each fit in memory::

    {"graph_name": "g",
     "node_type": ["paper", "author"],
     "num_nodes_per_chunk": [[5, 5], [3]],          # or "num_nodes_per_type": [10, 3]
     "edge_type": ["author:writes:paper"],           # "src:rel:dst"
     "num_edges_per_chunk": [[7, 6]],                # or "num_edges_per_type": [13]
     "edges": {"author:writes:paper": {"format": {"name": "csv", "delimiter": " "},
                                       "data": ["edges/writes-0.csv", "edges/writes-1.csv"]}},
     "node_data": {"paper": {"feat": {"format": {"name": "numpy"}, "data": [...]}}},
     "edge_data": {"author:writes:paper": {"time": {"format": {"name": "numpy"}, ...}}}}

Node ids are per node type, ``0..N-1`` over its chunks in order; edge chunk ``i`` of a
type holds that type's edges ``[sum(counts[:i]), sum(counts[:i+1]))``. Relative paths
are relative to the folder holding ``metadata.json`` and must stay inside it unless
``allow_external_paths`` is given (see :mod:`pyg_dist.chunked._paths`). Anything missing,
mistyped or inconsistent raises :class:`ChunkedFormatError` naming the file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

from pyg_dist.chunked._errors import ChunkedFormatError
from pyg_dist.chunked._paths import EXTERNAL_HINT, chunk_path, is_inside, regular_file_size
from pyg_dist.format._jsonio import read_json
from pyg_dist.format._schema import Field, PartitionFormatError
from pyg_dist._typing import EdgeType

#: the file that describes a chunked folder, at its top
METADATA_FILE = "metadata.json"
FORMATS = ("csv", "numpy", "parquet")
#: formats node/edge data chunks may use (they are read by row range, so no csv)
DATA_FORMATS = ("numpy", "parquet")
#: the largest ``metadata.json`` read (a listing of ~1M chunk files fits)
MAX_METADATA_BYTES = 64 * 2**20

__all__ = ["ChunkedFormatError", "ChunkedMeta", "ChunkFiles", "EdgeTypeSpec", "FileFormat",
           "NodeTypeSpec", "METADATA_FILE", "FORMATS", "DATA_FORMATS", "parse_edge_type"]


def parse_edge_type(name: str, source: str) -> EdgeType:
    """``"src:rel:dst"`` -> ``("src", "rel", "dst")``; raises naming ``source``."""
    parts = name.split(":") if isinstance(name, str) else []
    if len(parts) != 3 or not all(parts):
        raise ChunkedFormatError(f"{source}: edge type {name!r} is not of the form "
                                 f"'src:rel:dst'")
    return (parts[0], parts[1], parts[2])


@dataclass(frozen=True)
class FileFormat:
    """How the chunks of one edge type or one data array are stored.

    Args:
        name (str): ``"csv"`` (text, one row per line), ``"numpy"`` (``.npy``) or
            ``"parquet"``.
        delimiter (str): the column separator of ``csv`` files (default ``" "``).
    """
    name: str
    delimiter: str = " "

    def to_json(self) -> Dict[str, str]:
        if self.name == "csv":
            return {"name": self.name, "delimiter": self.delimiter}
        return {"name": self.name}

    @classmethod
    def from_json(cls, field: Field, allowed: Tuple[str, ...]) -> "FileFormat":
        name = field["name"].as_str()
        if name not in allowed:
            field["name"].fail(f"one of {', '.join(allowed)}")
        delimiter = field.get("delimiter", " ").as_str()
        if len(delimiter) != 1 or delimiter in "\n\r\"#-.0123456789":
            field["delimiter"].fail("a single separator character")
        return cls(name, delimiter)


@dataclass(frozen=True)
class ChunkFiles:
    """A ``ChunkFileSpec``: the format and the (resolved) path of every chunk.

    Args:
        format (FileFormat): how the chunks are stored.
        files (Tuple[Path, ...]): one path per chunk, in order.
    """
    format: FileFormat
    files: Tuple[Path, ...]

    @classmethod
    def from_json(cls, field: Field, root: Path, allowed: Tuple[str, ...],
                  allow_external: bool = False) -> "ChunkFiles":
        """Parses a ``ChunkFileSpec``; paths stay inside ``root`` unless
        ``allow_external`` (see :func:`~pyg_dist.chunked._paths.chunk_path`)."""
        fmt = FileFormat.from_json(field["format"], allowed)
        paths = field["data"].as_strs()
        if not paths:
            field["data"].fail("a non-empty list of file paths")
        where = f"{field.source}: field {field.path}[\"data\"]"
        return cls(fmt, tuple(chunk_path(root, p, where, allow_external) for p in paths))


@dataclass(frozen=True)
class NodeTypeSpec:
    """One node type: its name and the number of nodes of each of its chunks."""
    name: str
    chunk_counts: Tuple[int, ...]

    @property
    def num_nodes(self) -> int:
        return sum(self.chunk_counts)


@dataclass(frozen=True)
class EdgeTypeSpec:
    """One edge type and its edge chunks.

    Args:
        name (str): the canonical ``"src:rel:dst"`` string.
        edge_type (EdgeType): the same as a triple.
        num_edges (int): edges of this type.
        chunk_counts (Tuple[int, ...], optional): edges per chunk file (``None`` when
            ``metadata.json`` gave only ``num_edges_per_type``: checked while reading).
        files (ChunkFiles): the edge chunk files.
    """
    name: str
    edge_type: EdgeType
    num_edges: int
    chunk_counts: Optional[Tuple[int, ...]]
    files: ChunkFiles


@dataclass(frozen=True)
class ChunkedMeta:
    """Everything ``metadata.json`` says, checked for internal consistency.

    Args:
        graph_name (str): the graph's name.
        node_types (Dict[str, NodeTypeSpec]): by node type, in file order.
        edge_types (Dict[str, EdgeTypeSpec]): by ``"src:rel:dst"``, in file order.
        node_data (Dict[str, Dict[str, ChunkFiles]]): per node type, per name.
        edge_data (Dict[str, Dict[str, ChunkFiles]]): per edge type, per name.
        source (Path): the ``metadata.json`` read.
    """
    graph_name: str
    node_types: Dict[str, NodeTypeSpec]
    edge_types: Dict[str, EdgeTypeSpec]
    node_data: Dict[str, Dict[str, ChunkFiles]]
    edge_data: Dict[str, Dict[str, ChunkFiles]]
    source: Path

    @classmethod
    def read(cls, folder: Union[str, Path], allow_external_paths: bool = False
             ) -> "ChunkedMeta":
        """Reads ``folder/metadata.json``; raises :class:`ChunkedFormatError`.

        Args:
            folder (str or Path): the folder holding ``metadata.json``.
            allow_external_paths (bool): accept chunk paths that are absolute or resolve
                outside ``folder`` (DGL's format allows them; off by default).
        """
        folder = Path(folder)
        path = folder / METADATA_FILE
        if not folder.is_dir():
            raise ChunkedFormatError(f"chunked graph folder {folder} does not exist")
        if not os.path.lexists(path):
            raise ChunkedFormatError(f"{path} is missing: not a chunked graph folder "
                                     f"(write one with pyg-dist-chunk)")
        if not allow_external_paths and not is_inside(path, folder):
            raise ChunkedFormatError(f"{path} is a link to {os.path.realpath(path)}, outside "
                                     f"{folder} ({EXTERNAL_HINT})")
        size = regular_file_size(path, "metadata file", "")
        if size > MAX_METADATA_BYTES:
            raise ChunkedFormatError(f"{path} is {size} bytes, more than the "
                                     f"{MAX_METADATA_BYTES} a metadata file may have")
        obj = read_json(path, ChunkedFormatError)
        try:
            return cls.from_json(Field(obj, "", str(path)), folder, allow_external_paths)
        except PartitionFormatError as exc:  # Field's errors name the file already
            raise ChunkedFormatError(str(exc)) from None

    @classmethod
    def from_json(cls, doc: Field, root: Path, allow_external: bool = False
                  ) -> "ChunkedMeta":
        """Parses and checks a ``metadata.json`` document whose folder is ``root``."""
        name = doc.get("graph_name", "graph").as_str()
        node_types = _node_types(doc)
        edge_types = _edge_types(doc, root, node_types, allow_external)
        node_data = _data(doc, "node_data", root, node_types, allow_external)
        edge_data = _data(doc, "edge_data", root, edge_types, allow_external)
        return cls(name, node_types, edge_types, node_data, edge_data, Path(doc.source))


def _counts(doc: Field, kind: str, names: Tuple[str, ...]) -> Tuple[Tuple[int, ...], ...]:
    """Per type, the counts per chunk (``num_<kind>_per_chunk``) or one total per type."""
    per_chunk, per_type = f"num_{kind}_per_chunk", f"num_{kind}_per_type"
    fields = doc.as_dict()
    if per_chunk in fields:
        rows = fields[per_chunk].as_list(len(names))
        return tuple(row.as_ints(minimum=0) for row in rows)
    if per_type in fields:
        fields[per_type].as_list(len(names))
        return tuple((n,) for n in fields[per_type].as_ints(minimum=0))
    doc.child(per_chunk, None).fail(f"present (or {per_type})")


def _node_types(doc: Field) -> Dict[str, NodeTypeSpec]:
    names = doc["node_type"].as_strs()
    if not names or len(set(names)) != len(names):
        doc["node_type"].fail("a non-empty list of distinct node type names")
    counts = _counts(doc, "nodes", names)
    return {n: NodeTypeSpec(n, c) for n, c in zip(names, counts)}


def _edge_types(doc: Field, root: Path, node_types: Dict[str, NodeTypeSpec],
                allow_external: bool) -> Dict[str, EdgeTypeSpec]:
    names = doc["edge_type"].as_strs()
    if len(set(names)) != len(names):
        doc["edge_type"].fail("a list of distinct edge types")
    per_chunk = "num_edges_per_chunk" in doc.as_dict()
    counts = _counts(doc, "edges", names)
    edges = doc["edges"].as_dict()
    out = {}
    for name, count in zip(names, counts):
        edge_type = parse_edge_type(name, doc.source)
        for node_type in (edge_type[0], edge_type[2]):
            if node_type not in node_types:
                raise ChunkedFormatError(f"{doc.source}: edge type {name} names node type "
                                         f"{node_type!r}, which is not in node_type")
        if name not in edges:
            doc["edges"].child(name, None).fail("present (one entry per edge_type)")
        files = ChunkFiles.from_json(edges[name], root, FORMATS, allow_external)
        if per_chunk and len(count) != len(files.files):
            doc["edges"][name]["data"].fail(f"a list of {len(count)} files "
                                             f"(num_edges_per_chunk has {len(count)} chunks)")
        out[name] = EdgeTypeSpec(name, edge_type, sum(count), count if per_chunk else None,
                                 files)
    extra = set(edges) - set(names)
    if extra:
        doc["edges"].child(sorted(extra)[0], None).fail("an edge type listed in edge_type")
    return out


def _data(doc: Field, key: str, root: Path, types: Dict[str, object], allow_external: bool
          ) -> Dict[str, Dict[str, ChunkFiles]]:
    out: Dict[str, Dict[str, ChunkFiles]] = {}
    for type_name, arrays in doc.get(key, {}).as_dict().items():
        if type_name not in types:
            listed = "node_type" if key == "node_data" else "edge_type"
            raise ChunkedFormatError(f"{doc.source}: {key} names type {type_name!r}, which "
                                     f"is not in {listed}")
        out[type_name] = {
            name: ChunkFiles.from_json(spec, root, DATA_FORMATS, allow_external)
            for name, spec in arrays.as_dict().items()}
    return out
