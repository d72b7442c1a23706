"""``pyg-dist-partition`` / ``scripts/partition_graph.py``: partition a graph on disk.

Exit code 2 with a one-line message on bad input (every numeric option is range
checked). Progress goes to stderr: a bar on a terminal, plain lines otherwise.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple, Union

from torch_geometric.data import Data, HeteroData

from pyg_dist.chunked import ChunkedGraph, read_chunked
from pyg_dist.cli._common import Parser, UsageError, add_synthetic_args, run_main
from pyg_dist.datasets._by_name import CHOICES, load_named
from pyg_dist.datasets._errors import MissingDependencyError
from pyg_dist.datasets._loading import load_graph_file
from pyg_dist.datasets._pyg_extras import (ExtrasLayout, choose_labelled_type, extras_layout,
                                          labelled_node_type, write_pyg_extras)
from pyg_dist.datasets._synthetic import community_graph, hetero_community_graph
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.partition._api import (DEFAULT_RANK_BUDGET, PartitionResult, check_request,
                                    env_world_size, partition)
from pyg_dist.partition._options import PartitionOptions
from pyg_dist.partition._outofcore.budget import format_size, parse_size, peak_rss_bytes
from pyg_dist._progress import step

__all__ = ["main"]

MAX_SEED = 2**31 - 1  # METIS takes a C int


# numeric options: (smallest, largest) allowed value; checked before anything runs
INT_RANGES = {"num_parts": (1, None), "seed": (0, MAX_SEED), "num_nodes": (2, None),
              "feat_dim": (1, None), "num_classes": (1, None)}


def check_numbers(args: argparse.Namespace) -> None:
    """Raises :class:`UsageError` naming the first numeric option out of its range."""
    for name, (low, high) in INT_RANGES.items():
        value = getattr(args, name)
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise UsageError(f"--{name.replace('_', '-')} must be {bound}, got {value}")
    if not math.isfinite(args.avg_degree) or args.avg_degree <= 0:
        raise UsageError(f"--avg-degree must be a finite number > 0, got {args.avg_degree}")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="pyg-dist-partition",
                description="Partition a graph for pyg_dist (METIS, KaMinPar or random).")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help=CHOICES)
    source.add_argument("--input", metavar="DIR",
                        help="a chunked graph folder (DGL's chunked graph format: "
                             "metadata.json + chunks, as pyg-dist-chunk writes it); assembled "
                             "in memory unless --memory-budget is given")
    p.add_argument("--allow-external-paths", action="store_true",
                   help="with --input: also read chunk files that metadata.json lists by "
                        "absolute path or by a path leading outside DIR (DGL's format allows "
                        "them; refused by default, since a folder from elsewhere could name "
                        "any file this process can read)")
    p.add_argument("--root", default=None,
                   help="the dataset folder, as the dataset's own loader takes it (Planetoid: "
                        "holding <Name>/raw/ind.*; PyG classes: holding raw/; OGB: holding "
                        "ogbn_<name>/)")
    p.add_argument("--download", action="store_true",
                   help="download missing dataset files (default: error naming them)")
    p.add_argument("--num-parts", type=int, required=True, help="number of partitions")
    p.add_argument("--out", required=True, help="output partition folder")
    p.add_argument("--method", choices=["metis", "kaminpar", "random"], default="metis",
                   help="metis (default); kaminpar (needs the optional kaminpar package: "
                        "pip install 'pyg_dist[kaminpar]'); random")
    p.add_argument("--coarsen", action=argparse.BooleanOptionalAction, default=None,
                   help="METIS on a label-propagation clustering of the graph: far less "
                        "memory on large graphs, a similar cut (default: only when plain "
                        "METIS would not fit in the available memory)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory-budget", metavar="SIZE", default=None,
                   help="with --input: partition out of core, streaming edges and feature "
                        "rows from the chunks and holding at most SIZE (e.g. 4GB, 512MB) "
                        "beyond a few bytes per node; same output as the in-memory path")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--pyg-extras", action="store_true",
                   help="also write torch_geometric.distributed's <name>-label/label.pt and "
                        "<name>-<split>-partitions/partition<i>.pt beside --out (in the "
                        "dataset's original node ids, as PyG writes them)")
    p.add_argument("--pyg-extras-type", default=None, metavar="TYPE",
                   help="the labelled node type the extras describe (heterogeneous graphs "
                        "with several labelled types)")
    add_synthetic_args(p)
    return p


def load_dataset(args: argparse.Namespace) -> Union[Data, HeteroData]:
    """The graph ``--dataset`` or ``--input`` names; raises :class:`UsageError` on bad input."""
    if getattr(args, "input", None) is not None:
        return load_chunked_input(args.input, args.allow_external_paths)
    name = args.dataset
    if name.lower() == "synthetic":
        if args.hetero:
            return hetero_community_graph(args.num_nodes, avg_degree=args.avg_degree / 2,
                                          feat_dim=args.feat_dim, num_classes=args.num_classes,
                                          seed=args.seed)
        return community_graph(args.num_nodes, args.avg_degree, args.feat_dim,
                               args.num_classes, seed=args.seed)
    try:
        if Path(name).suffix == ".pt" or Path(name).is_file():
            return load_graph_file(name)  # ValueError: cannot be loaded safely
        return load_named(name, args.root, download=args.download)
    except (FileNotFoundError, ValueError, MissingDependencyError,
            NotImplementedError) as exc:  # one line each, naming what to do
        raise UsageError(str(exc)) from exc


def load_chunked_input(folder: str, allow_external_paths: bool = False
                       ) -> Union[Data, HeteroData]:
    """A chunked graph folder assembled in memory (after checking that its counts fit the
    memory available); raises :class:`UsageError`."""
    try:
        return read_chunked(folder, allow_external_paths)
    except (ValueError, MissingDependencyError) as exc:  # ChunkedFormatError included
        raise UsageError(str(exc)) from exc


def source_name(args: argparse.Namespace) -> str:
    """What the graph is called in messages: the dataset name or the input folder."""
    return args.dataset if args.dataset is not None else str(args.input)


def prepare_extras(args: argparse.Namespace) -> Optional[ExtrasLayout]:
    """Where ``--pyg-extras`` writes; refuses files of an earlier run unless --overwrite."""
    if not args.pyg_extras:
        if args.pyg_extras_type is not None:
            raise UsageError("--pyg-extras-type needs --pyg-extras")
        return None
    layout = extras_layout(args.out, source_name(args) if args.dataset is not None
                           else Path(args.input).name)
    existing = layout.existing()
    if existing and not args.overwrite:
        raise UsageError(f"--pyg-extras: {existing[0]} exists (pass --overwrite to replace "
                         f"the files of {layout.name} in {layout.parent})")
    return layout


def check_kaminpar() -> None:
    """Raises :class:`UsageError` (one line) when ``--method kaminpar`` cannot be used,
    before any dataset is loaded."""
    from pyg_dist.partition._kaminpar_assign import kaminpar_module

    try:
        kaminpar_module()
    except ImportError as exc:
        raise UsageError(str(exc)) from exc


def summary_table(meta: PartitionMeta) -> str:
    """One row per partition: owned nodes, halo nodes, edges, cut edges %, train nodes."""
    rows = [f"{'part':>4} {'owned':>10} {'halo':>10} {'edges':>12} {'cut %':>7} {'train':>8}"]
    for p, s in enumerate(meta.parts):
        edges, cut = sum(s.edges.values()), sum(s.cut_edges.values())
        pct = 100.0 * cut / edges if edges else 0.0
        rows.append(f"{p:>4} {sum(s.owned_nodes.values()):>10} {sum(s.halo_nodes.values()):>10} "
                    f"{edges:>12} {pct:>7.2f} {s.train_nodes:>8}")
    return "\n".join(rows)


def run(argv: Optional[List[str]] = None) -> int:
    """Parses the arguments and hands them to :func:`pyg_dist.partition.partition`, which
    picks the mode (in memory, out of core, several ranks); prints a summary."""
    args = build_parser().parse_args(argv)
    check_numbers(args)
    try:  # before loading anything
        check_request(PartitionOptions(args.method, args.seed, args.coarsen,
                                       memory_budget=args.memory_budget,
                                       allow_external_paths=args.allow_external_paths),
                      in_memory=args.input is None)
        if args.memory_budget is not None:
            parse_size(args.memory_budget)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.method == "kaminpar":
        check_kaminpar()
    world = env_world_size()
    out = Path(args.out)
    if world == 1 and out.exists() and (not out.is_dir() or any(out.iterdir())) \
            and not args.overwrite:  # several ranks check it together, in the library
        raise UsageError(f"--out {out} exists and is not empty (pass --overwrite to replace it)")
    if world > 1 and args.pyg_extras:
        raise UsageError("--pyg-extras is not built for multi-machine partitioning yet: run "
                         "it on one machine")
    layout = prepare_extras(args)
    start = time.perf_counter()
    source, extras_type = open_source_arg(args, layout is not None)
    try:
        result = partition(source, out, args.num_parts, args.method, seed=args.seed,
                           memory_budget=args.memory_budget, coarsen=args.coarsen,
                           overwrite=args.overwrite, progress=not args.quiet,
                           allow_external_paths=args.allow_external_paths)
    except (ValueError, ImportError) as exc:  # options, budget, chunks; kaminpar missing
        raise UsageError(str(exc)) from exc
    del source
    print_summary(args, result, time.perf_counter() - start)
    if layout is not None:
        print_extras(out, layout, extras_type, args.quiet)
    return 0


def open_source_arg(args: argparse.Namespace, extras: bool) -> Tuple[object, Optional[str]]:
    """The source ``--input`` (a chunked folder's path: the library opens it, on every
    rank together under torchrun) or ``--dataset`` (a graph in memory) names, and the
    node type ``--pyg-extras`` describes (``extras``)."""
    try:
        if args.input is not None:
            return args.input, chunked_labelled_type(
                ChunkedGraph.open(args.input, args.allow_external_paths),
                args.pyg_extras_type) if extras else None
        with step(f"loading {source_name(args)}", enabled=not args.quiet):
            data = load_dataset(args)
        return data, labelled_node_type(data, args.pyg_extras_type) if extras else None
    except (ValueError, MissingDependencyError) as exc:  # ChunkedFormatError included
        raise UsageError(str(exc)) from exc


def print_summary(args: argparse.Namespace, result: PartitionResult, total: float) -> None:
    """What was partitioned, how (mode, per-phase seconds, peak memory) and the table."""
    meta, phases = result.meta, result.timings.phases_s if result.timings else {}
    how = {"memory": "", "out_of_core": f" out of core (memory budget "
           f"{format_size(parse_size(args.memory_budget or '1'))})",
           "multi_machine": f" on {result.world} ranks (memory budget "
           f"{args.memory_budget or DEFAULT_RANK_BUDGET} each)"}[result.mode]
    if result.mode == "multi_machine" and env_rank() != 0:
        return
    print(f"partitioned {source_name(args)} into {meta.num_parts} part(s) with {meta.method}"
          f"{how} in {total:.1f}s -> {args.out} (uid {meta.uid})")
    if result.mode != "memory":
        print("phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items())
              + f"; peak RSS {format_size(peak_rss_bytes())} (memory-mapped scratch pages "
                f"included)")
    print(summary_table(meta))


def print_extras(out: Path, layout: ExtrasLayout, node_type: Optional[str],
                 quiet: bool) -> None:
    """Writes ``--pyg-extras``' files for the finished partition folder ``out``."""
    with step("writing PyG-style extras", enabled=not quiet):
        written = write_pyg_extras(out, layout, node_type)
    print(f"wrote {written.label_file} and partition<i>.pt files for split(s) "
          f"{', '.join(sorted(written.split_files)) or 'none'} in {layout.parent}")


def chunked_labelled_type(graph: ChunkedGraph, requested: Optional[str]) -> Optional[str]:
    """The node type ``--pyg-extras`` describes, read from an opened chunked folder's node
    data (``None`` for a homogeneous graph: its only type)."""
    typed = [t for t in graph.node_types if "y" in graph.node_data_names(t)]
    chosen = choose_labelled_type(typed, graph.is_hetero, requested)
    return chosen if graph.is_hetero else None


def env_rank() -> int:
    """``RANK`` as ``torchrun`` sets it (0 when unset)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def run_ranks(argv: Optional[List[str]] = None) -> int:
    """:func:`run` on one rank of several: failures are reported to the other ranks'
    health watchdogs; exit 2 for bad input (the same message on every rank), 1 when
    another rank failed or died (naming it)."""
    from pyg_dist.rpc import DisagreementError, PeerFailedError, _health as health

    try:
        code = run(argv)
    except UsageError as exc:
        health.report_failure(exc)
        cause = exc.__cause__
        if env_rank() == 0 or cause is None or isinstance(cause, DisagreementError):
            raise
        raise UsageError(f"rank {env_rank()}: {exc}") from cause
    except PeerFailedError as exc:
        health.report_failure(exc)
        print(f"pyg-dist-partition (rank {env_rank()}): error: {' '.join(str(exc).split())}",
              file=sys.stderr)
        return 1
    except BaseException as exc:
        health.report_failure(exc)
        raise
    health.report_done()
    return code


def main(argv: Optional[List[str]] = None) -> int:
    """Runs ``pyg-dist-partition`` on ``argv`` (default: ``sys.argv[1:]``); returns the exit code
    (2 with one line naming the problem on bad input)."""
    return run_main(run_ranks if env_world_size() > 1 else run, "pyg-dist-partition", argv)


if __name__ == "__main__":
    sys.exit(main())
