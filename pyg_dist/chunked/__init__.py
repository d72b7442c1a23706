"""Chunked graph input and output: DGL's chunked graph format (``metadata.json`` plus
edge chunks in text, ``.npy`` or parquet, and node/edge data chunks).

- :class:`ChunkedGraph` reads a folder chunk by chunk (``open``, ``iter_edge_chunks``,
  ``iter_node_data``, ``iter_edge_data``, ``read_rows``), checking what it reads.
- :func:`write_chunked` writes a ``Data``/``HeteroData`` into that layout.
- :func:`read_chunked` assembles a whole folder in memory (small graphs, tests).

A folder is untrusted: its chunk paths stay inside it unless ``allow_external_paths``
(:mod:`pyg_dist.chunked._paths`), only regular files are read, and its counts are checked
against the files' sizes and the memory they imply before anything is allocated
(:mod:`pyg_dist.chunked._limits`).
"""
from pyg_dist.chunked._assemble import read_chunked
from pyg_dist.chunked._errors import ChunkedFormatError, ChunkedTooLargeError
from pyg_dist.chunked._metadata import METADATA_FILE, ChunkedMeta
from pyg_dist.chunked._reader import ChunkedGraph
from pyg_dist.chunked._writer import write_chunked

__all__ = ["ChunkedGraph", "ChunkedMeta", "ChunkedFormatError", "ChunkedTooLargeError",
           "METADATA_FILE", "read_chunked", "write_chunked"]
