"""``pyg-dist-chunk`` / ``scripts/chunk_graph.py``: write a graph as a chunked folder.

Takes every dataset ``pyg-dist-partition`` takes (Planetoid, OGB, PyG classes,
``synthetic``, a saved ``.pt`` graph) and writes DGL's chunked graph format
(``metadata.json``, edge chunks, node/edge data chunks), which ``pyg-dist-partition
--input DIR`` reads back. Exit code 2 with a one-line message on bad input.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional

from pyg_dist.chunked._metadata import DATA_FORMATS, FORMATS
from pyg_dist.chunked._writer import DEFAULT_CHUNK_SIZE, write_chunked
from pyg_dist.cli._common import Parser, UsageError, add_synthetic_args, run_main
from pyg_dist.cli.partition import MAX_SEED, load_dataset
from pyg_dist.datasets._by_name import CHOICES
from pyg_dist.datasets._errors import MissingDependencyError
from pyg_dist._progress import step

__all__ = ["main"]

PROG = "pyg-dist-chunk"
INT_RANGES = {"chunk_size": (1, None), "seed": (0, MAX_SEED), "num_nodes": (2, None),
              "feat_dim": (1, None), "num_classes": (1, None)}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=(
        "Write a graph in DGL's chunked graph format (metadata.json plus edge and "
        "node/edge data chunks), the input format of pyg-dist-partition --input for "
        "graphs too big for one machine."))
    p.add_argument("--dataset", required=True, help=CHOICES)
    p.add_argument("--root", default=None, help="the dataset folder (as pyg-dist-partition)")
    p.add_argument("--download", action="store_true", help="download missing dataset files")
    p.add_argument("--out", required=True, help="output folder (written atomically)")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help=f"most nodes or edges per chunk file (default {DEFAULT_CHUNK_SIZE})")
    p.add_argument("--edge-format", choices=FORMATS, default="numpy",
                   help="edge chunks: numpy ([E, 2] .npy), csv (text, 'src dst' per "
                        "line) or parquet (needs pyarrow)")
    p.add_argument("--data-format", choices=DATA_FORMATS, default="numpy",
                   help="node/edge data chunks (default numpy)")
    p.add_argument("--delimiter", default=" ", help="column separator of csv edge chunks")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic graph")
    add_synthetic_args(p)
    return p


def check_args(args: argparse.Namespace) -> None:
    """Raises :class:`UsageError` naming the first option out of its range."""
    for name, (low, high) in INT_RANGES.items():
        value = getattr(args, name)
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise UsageError(f"--{name.replace('_', '-')} must be {bound}, got {value}")
    if not args.avg_degree > 0 or args.avg_degree == float("inf"):
        raise UsageError(f"--avg-degree must be a finite number > 0, got {args.avg_degree}")
    if len(args.delimiter) != 1 or args.delimiter in "\n\r\"#-.0123456789":
        raise UsageError(f"--delimiter must be one separator character, got {args.delimiter!r}")


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    start = time.perf_counter()
    with step(f"loading {args.dataset}", enabled=not args.quiet):
        data = load_dataset(args)
    try:
        graph = write_chunked(data, args.out, chunk_size=args.chunk_size,
                              edge_format=args.edge_format, data_format=args.data_format,
                              delimiter=args.delimiter, overwrite=args.overwrite,
                              progress=not args.quiet)
    except (ValueError, FileExistsError, MissingDependencyError) as exc:
        raise UsageError(str(exc)) from exc
    chunks = sum(len(s.files.files) for s in graph.meta.edge_types.values())
    print(f"wrote {args.dataset} as {len(graph.node_types)} node type(s), "
          f"{len(graph.edge_types)} edge type(s), {chunks} edge chunk(s) "
          f"({args.edge_format}) in {time.perf_counter() - start:.1f}s -> {args.out}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Runs ``pyg-dist-chunk`` on ``argv`` (default: ``sys.argv[1:]``); returns the exit code
    (2 with one line naming the problem on bad input)."""
    return run_main(run, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())
