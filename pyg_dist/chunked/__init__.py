"""Chunked graph input and output: DGL's chunked graph format (``metadata.json`` plus
edge chunks in text, ``.npy`` or parquet, and node/edge data chunks).

- :class:`ChunkedGraph` reads a folder chunk by chunk (``open``, ``iter_edge_chunks``,
  ``iter_node_data``, ``iter_edge_data``, ``read_rows``), checking what it reads.
- :func:`write_chunked` writes a ``Data``/``HeteroData`` into that layout.
- :func:`read_chunked` assembles a whole folder in memory (small graphs, tests).
"""
from pyg_dist.chunked.assemble import read_chunked
from pyg_dist.chunked.metadata import METADATA_FILE, ChunkedFormatError, ChunkedMeta
from pyg_dist.chunked.reader import ChunkedGraph
from pyg_dist.chunked.writer import write_chunked

__all__ = ["ChunkedGraph", "ChunkedMeta", "ChunkedFormatError", "METADATA_FILE",
           "read_chunked", "write_chunked"]
