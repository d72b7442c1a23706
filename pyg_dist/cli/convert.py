"""``pyg-dist-convert`` / ``scripts/convert_partitions.py``: a torch_geometric.distributed
partition folder -> pyg_dist's format, keeping its node -> partition assignment.

Exit code 2 with a one-line message on bad input (a missing, damaged or inconsistent
file is named) and when a file needs ``--trust-pickles`` that was not given.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional

from pyg_dist.cli._common import Parser, UsageError, run_main
from pyg_dist.cli.partition import summary_table
from pyg_dist.convert._pickles import PygFormatError
from pyg_dist.convert._pyg import convert_pyg_partitions
from pyg_dist.datasets._errors import DatasetError
from pyg_dist.format._meta import PartitionFormatError

__all__ = ["main"]

PROG = "pyg-dist-convert"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=(
        "Convert a folder written by torch_geometric.distributed.Partitioner (PyG 2.5-2.8) "
        "into pyg_dist's format without repartitioning: every node stays in the partition "
        "PyG gave it; ids are relabelled into contiguous ranges. Labels and split files "
        "beside the folder (<name>-label/label.pt, <name>-{train,val,test}-partitions/, as "
        "PyG's examples write them) become y and train/val/test masks. The whole graph is "
        "held in one process while converting, as PyG's own partitioner needed too."))
    p.add_argument("--input", required=True,
                   help="the PyG partition folder (holding META.json and part_<i>/)")
    p.add_argument("--out", required=True, help="output partition folder (written atomically)")
    p.add_argument("--trust-pickles", action="store_true",
                   help="load PyG files that torch.load(weights_only=True) refuses (its "
                        "edge_feats.pt) with weights_only=False; this can run code stored "
                        "in them: only for folders from a source you trust")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --out (and extras folders beside it)")
    p.add_argument("--pyg-extras", action="store_true",
                   help="also write the labels and split files beside --out in the dataset's "
                        "original ids (<name>-label/label.pt ordered by original node id; "
                        "<name>-<split>-partitions/partition<i>.pt = original ids of the "
                        "split's nodes partition i owns)")
    p.add_argument("--label-node-type", default=None,
                   help="heterogeneous graphs: the node type of label.pt and the split files "
                        "(default: the one with as many nodes as label.pt has rows)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    return p


def _warn(line: str) -> None:
    print(f"{PROG}: warning: {line}", file=sys.stderr, flush=True)


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        result = convert_pyg_partitions(
            args.input, args.out, trust_pickles=args.trust_pickles, overwrite=args.overwrite,
            pyg_extras=args.pyg_extras, label_node_type=args.label_node_type,
            progress=not args.quiet, notify=_warn, trust_flag="--trust-pickles")
    except (PygFormatError, PartitionFormatError, FileExistsError, DatasetError) as exc:
        raise UsageError(str(exc)) from exc
    meta = result.meta
    print(f"converted {args.input} ({meta.num_parts} part(s), torch_geometric.distributed) "
          f"-> {args.out} without repartitioning in {time.perf_counter() - start:.1f}s "
          f"(uid {meta.uid})")
    if result.label_node_type is not None:
        print(f"labels/splits from beside the input: node type {result.label_node_type}, "
              f"splits {', '.join(result.splits) or 'none'}")
    if result.extras_written:
        label, *chunks = result.extras_written
        print(f"wrote PyG extras in pyg_dist's ids: {label} and {len(chunks)} split file(s) "
              f"in {label.parent.parent}/<name>-<split>-partitions/")
    if result.unsafe_files:
        print(f"({result.unsafe_files} file(s) loaded as trusted pickles, --trust-pickles)")
    print(summary_table(meta))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Runs ``pyg-dist-convert`` on ``argv`` (default: ``sys.argv[1:]``); returns the exit code
    (2 with one line naming the problem on bad input)."""
    return run_main(run, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())
