"""Writing a ``Data``/``HeteroData`` as a chunked graph folder (DGL's chunked format).

Layout written (every path in ``metadata.json`` is relative to it)::

    OUT/metadata.json
    OUT/edges/<src__rel__dst>/part-<i>.npy|.csv|.parquet     # [E_i, 2] source, destination
    OUT/node_data/<node type>/<name>-<i>.npy|.parquet         # rows of nodes of chunk i
    OUT/edge_data/<src__rel__dst>/<name>-<i>.npy|.parquet     # rows of edges of chunk i

The folder is written beside ``OUT`` under a hidden name and renamed into place at
the end (:func:`pyg_dist.format._files.atomic_dir`), so ``OUT`` is never half written.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.chunked import _arrays as arrays
from pyg_dist.chunked._metadata import DATA_FORMATS, FORMATS, METADATA_FILE, FileFormat
from pyg_dist.chunked._reader import ChunkedGraph
from pyg_dist.format import _files as files
from pyg_dist.format._tables import GraphTables
from pyg_dist._progress import track

DEFAULT_CHUNK_SIZE = 1_000_000
_EXT = {"numpy": "npy", "csv": "csv", "parquet": "parquet"}

def _safe(name: str, taken: set) -> str:
    """A file-name-safe, unique form of a type name."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"
    safe, i = base, 1
    while safe.lower() in taken:
        safe, i = f"{base}_{i}", i + 1
    taken.add(safe.lower())
    return safe

def _bounds(total: int, chunk_size: int) -> List[Tuple[int, int]]:
    """``[start, stop)`` of each chunk; one empty chunk when ``total`` is 0."""
    if total == 0:
        return [(0, 0)]
    return [(a, min(a + chunk_size, total)) for a in range(0, total, chunk_size)]

def _numpy(value: Tensor, what: str) -> np.ndarray:
    if value.dtype == torch.bfloat16:
        raise ValueError(f"{what} is bfloat16, which NumPy (and so the chunked format) "
                         f"cannot hold; cast it to float32 first")
    return value.detach().cpu().numpy()

def _dump(meta: Dict[str, Any]) -> str:
    """``metadata.json`` text: one top-level key per line, nested values compact."""
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _check_names(tables: GraphTables) -> None:
    for name in [*tables.num_nodes, *(r for _, r, _ in tables.edge_index)]:
        if ":" in name or not name:
            raise ValueError(f"type name {name!r} is empty or holds ':', which the chunked "
                             f"format uses to join 'src:rel:dst'")

class _Writer:
    """Writes the chunks of one graph into ``folder`` and collects ``metadata.json``."""

    def __init__(self, folder: Path, chunk_size: int, edge_format: FileFormat,
                 data_format: str, progress: bool) -> None:
        self.folder, self.chunk_size = folder, chunk_size
        self.edge_format, self.data_format = edge_format, data_format
        self.progress = progress
        self.taken: Dict[str, set] = {}

    def _dir(self, kind: str, type_name: str) -> Tuple[Path, str]:
        rel = f"{kind}/{_safe(type_name, self.taken.setdefault(kind, set()))}"
        (self.folder / rel).mkdir(parents=True)
        return self.folder / rel, rel

    def edges(self, name: str, index: Tensor) -> Dict[str, Any]:
        folder, rel = self._dir("edges", name.replace(":", "__"))
        ext, files = _EXT[self.edge_format.name], []
        for i, (a, b) in enumerate(_bounds(index.size(1), self.chunk_size)):
            ids = np.ascontiguousarray(index[:, a:b].t().numpy().astype(np.int64, copy=False))
            path = folder / f"part-{i}.{ext}"
            if self.edge_format.name == "numpy":
                arrays.write_npy(path, ids)
            elif self.edge_format.name == "csv":
                arrays.write_csv_ids(path, ids, self.edge_format.delimiter)
            else:
                arrays.write_parquet(path, ids, names=("src", "dst"))
            files.append(f"{rel}/{path.name}")
        return {"format": self.edge_format.to_json(), "data": files}

    def data(self, kind: str, type_name: str, attrs: Dict[str, Tensor]) -> Dict[str, Any]:
        if not attrs:
            return {}
        folder, rel = self._dir(kind, type_name.replace(":", "__"))
        out, taken = {}, set()
        for name, value in attrs.items():
            values = _numpy(value, f"{kind} {type_name}/{name}")
            stem, files = _safe(name, taken), []
            for i, (a, b) in enumerate(_bounds(values.shape[0], self.chunk_size)):
                path = folder / f"{stem}-{i}.{_EXT[self.data_format]}"
                if self.data_format == "numpy":
                    arrays.write_npy(path, values[a:b])
                else:
                    arrays.write_parquet(path, values[a:b])
                files.append(f"{rel}/{path.name}")
            out[name] = {"format": {"name": self.data_format}, "data": files}
        return out

    def write(self, tables: GraphTables, graph_name: str) -> Dict[str, Any]:
        edge_names = {et: ":".join(et) for et in tables.edge_index}
        meta: Dict[str, Any] = {
            "graph_name": graph_name,
            "node_type": list(tables.num_nodes),
            "num_nodes_per_chunk": [[b - a for a, b in _bounds(n, self.chunk_size)]
                                    for n in tables.num_nodes.values()],
            "edge_type": list(edge_names.values()),
            "num_edges_per_chunk": [[b - a for a, b in _bounds(i.size(1), self.chunk_size)]
                                    for i in tables.edge_index.values()],
            "edges": {}, "node_data": {}, "edge_data": {}}
        for et in self._bar(tables.edge_index, "writing edge chunks"):
            meta["edges"][edge_names[et]] = self.edges(edge_names[et], tables.edge_index[et])
        for t, attrs in self._bar(tables.node_attrs.items(), "writing node data"):
            if attrs:
                meta["node_data"][t] = self.data("node_data", t, attrs)
        for et, attrs in self._bar(tables.edge_attrs.items(), "writing edge data"):
            if attrs:
                meta["edge_data"][edge_names[et]] = self.data("edge_data", edge_names[et], attrs)
        return meta

    def _bar(self, items: Any, what: str) -> Any:
        items = list(items)
        return track(items, what, enabled=self.progress)

def write_chunked(data: Union[Data, HeteroData], out: Union[str, Path],
                  chunk_size: int = DEFAULT_CHUNK_SIZE, edge_format: str = "numpy",
                  data_format: str = "numpy", delimiter: str = " ",
                  graph_name: Optional[str] = None, overwrite: bool = False,
                  progress: bool = False) -> ChunkedGraph:
    """Writes ``data`` as a chunked graph folder (DGL's chunked graph format).

    Homogeneous graphs are written with node type ``"_N"`` and edge type
    ``"_N:_E:_N"`` (DGL's convention), which :func:`read_chunked` maps back to ``Data``.
    Node data are all node-level tensors (``x``, ``y``, ``*_mask``, ...), edge data all
    edge-level ones (``edge_attr``, ``time``/``edge_time``, ...), as the partitioner
    classifies them.

    Args:
        data (Data or HeteroData): the graph.
        out (str or Path): the output folder (absent or empty unless ``overwrite``).
        chunk_size (int): the most nodes or edges per chunk file.
        edge_format (str): ``"numpy"`` (``[E, 2]`` ``.npy``), ``"csv"`` (text, one
            ``src dst`` pair per line) or ``"parquet"`` (needs ``pyarrow``).
        data_format (str): ``"numpy"`` or ``"parquet"`` for node and edge data.
        delimiter (str): the column separator of ``csv`` edge chunks.
        graph_name (str, optional): ``graph_name`` in ``metadata.json`` (default: the
            folder name).
        overwrite (bool): replace an existing non-empty ``out``.
        progress (bool): report progress on ``stderr``.

    Returns:
        The written folder, opened with :meth:`ChunkedGraph.open`.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if edge_format not in FORMATS:
        raise ValueError(f"edge_format must be one of {', '.join(FORMATS)}, got {edge_format!r}")
    if data_format not in DATA_FORMATS:
        raise ValueError(f"data_format must be one of {', '.join(DATA_FORMATS)}, "
                         f"got {data_format!r}")
    if "parquet" in (edge_format, data_format):
        arrays.pyarrow_modules()  # fail before writing anything
    tables = GraphTables.from_data(data)
    _check_names(tables)
    out = Path(out)
    with files.atomic_dir(out, overwrite=overwrite) as tmp:
        writer = _Writer(tmp, chunk_size, FileFormat(edge_format, delimiter), data_format,
                         progress)
        meta = writer.write(tables, graph_name or out.name)
        (tmp / METADATA_FILE).write_text(_dump(meta))
    return ChunkedGraph.open(out)
