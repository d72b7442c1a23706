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
from typing import List, Optional, Union

from torch_geometric.data import Data, HeteroData

from pyg_dist.chunked import ChunkedGraph, read_chunked
from pyg_dist.cli.common import Parser, UsageError, add_synthetic_args, run_main
from pyg_dist.datasets.by_name import CHOICES, load_named
from pyg_dist.datasets.errors import MissingDependencyError
from pyg_dist.datasets.loading import load_graph_file
from pyg_dist.datasets.pyg_extras import (ExtrasLayout, choose_labelled_type, extras_layout,
                                          labelled_node_type, write_pyg_extras)
from pyg_dist.datasets.synthetic import community_graph, hetero_community_graph
from pyg_dist.format.meta import PartitionMeta
from pyg_dist.partition.partitioner import Partitioner
from pyg_dist.partition.progress import step

MAX_SEED = 2**31 - 1  # METIS takes a C int
DEFAULT_RANK_BUDGET = "1GB"  # --memory-budget of each rank under torchrun
DIST_COLLECTIVE_TIMEOUT_S = 3600.0


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
    from pyg_dist.partition.kaminpar_assign import kaminpar_module

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
    args = build_parser().parse_args(argv)
    check_numbers(args)
    if args.coarsen and args.method != "metis":
        raise UsageError(f"--coarsen: coarsen=True applies to method='metis', "
                         f"not '{args.method}'")
    if args.method == "kaminpar":
        check_kaminpar()
    if args.allow_external_paths and args.input is None:
        raise UsageError("--allow-external-paths applies to --input DIR (a chunked graph "
                         "folder)")
    out = Path(args.out)
    if under_torchrun():  # every rank checks the output folder; they agree on it together
        return run_distributed(args, out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        raise UsageError(f"--out {out} exists and is not empty (pass --overwrite to replace it)")
    if args.memory_budget is not None:
        return run_out_of_core(args, out)
    layout = prepare_extras(args)
    start = time.perf_counter()
    with step(f"loading {source_name(args)}", enabled=not args.quiet):
        data = load_dataset(args)
    try:
        extras_type = labelled_node_type(data, args.pyg_extras_type) if layout else None
        partitioner = Partitioner(data, args.num_parts, out, method=args.method, seed=args.seed,
                                  overwrite=args.overwrite, progress=not args.quiet,
                                  coarsen=args.coarsen)
    except (ValueError, ImportError) as exc:  # DatasetError; --method kaminpar, not installed
        raise UsageError(str(exc)) from exc
    meta = partitioner.generate()
    del data, partitioner
    total = time.perf_counter() - start
    print(f"partitioned {source_name(args)} into {meta.num_parts} part(s) with {meta.method} "
          f"in {total:.1f}s -> {out} (uid {meta.uid})")
    print(summary_table(meta))
    if layout is not None:
        print_extras(out, layout, extras_type, args.quiet)
    return 0


def run_out_of_core(args: argparse.Namespace, out: Path) -> int:
    """``--input DIR --memory-budget SIZE``: :class:`OutOfCorePartitioner`, then a summary
    with per-phase seconds and the peak resident memory."""
    from pyg_dist.partition.outofcore import OutOfCorePartitioner, parse_size
    from pyg_dist.partition.outofcore.budget import format_size, peak_rss_bytes

    if args.input is None:
        raise UsageError("--memory-budget applies to --input DIR (a chunked graph folder)")
    layout = prepare_extras(args)
    start = time.perf_counter()
    try:
        graph = ChunkedGraph.open(args.input, args.allow_external_paths)
        extras_type = chunked_labelled_type(graph, args.pyg_extras_type) if layout else None
        budget = parse_size(args.memory_budget)
        partitioner = OutOfCorePartitioner(graph, args.num_parts, out, budget,
                                           method=args.method, seed=args.seed,
                                           overwrite=args.overwrite, progress=not args.quiet,
                                           coarsen=args.coarsen)
        meta = partitioner.generate()
    except (ValueError, MissingDependencyError) as exc:  # chunk, budget and option errors
        raise UsageError(str(exc)) from exc
    phases = partitioner.timings.phases_s if partitioner.timings else {}
    print(f"partitioned {args.input} into {meta.num_parts} part(s) with {meta.method} out of "
          f"core (memory budget {format_size(budget)}) in {time.perf_counter() - start:.1f}s "
          f"-> {out} (uid {meta.uid})")
    steps = ("assign", "relabel", "order_edges", "copy_rows", "uid", "write")
    inner = ", ".join(f"{k} {v:.1f}s" for k, v in phases.items() if k not in steps)
    print("phases: " + ", ".join(f"{k} {phases[k]:.1f}s" + (f" ({inner})" if k == "assign"
                                                            and inner else "")
                                 for k in steps if k in phases)
          + f"; peak RSS {format_size(peak_rss_bytes())} (memory-mapped scratch pages "
            f"included)")
    print(summary_table(meta))
    if layout is not None:
        print_extras(out, layout, extras_type, args.quiet)
    return 0


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


def under_torchrun() -> bool:
    """Whether this process is one of several ranks (``WORLD_SIZE`` > 1, as torchrun sets)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def run_distributed(args: argparse.Namespace, out: Path) -> int:
    """Under ``torchrun``: every rank takes part in partitioning ``--input``
    (:class:`~pyg_dist.partition.distributed.DistPartitioner`); rank 0 prints the summary.
    Exit 2 for bad input (the same message on every rank), 1 when another rank failed
    or died (naming it)."""
    from datetime import timedelta

    from pyg_dist.partition.distributed import Comm, DistPartitioner
    from pyg_dist.partition.outofcore import parse_size
    from pyg_dist.partition.outofcore.budget import format_size, peak_rss_bytes
    from pyg_dist.rpc import DisagreementError, DistContext, PeerFailedError, health
    from pyg_dist.rpc.runtime import init_process_group

    if args.input is None:
        raise UsageError("under torchrun, pyg-dist-partition partitions a chunked graph on "
                         "every rank: pass --input DIR (pyg-dist-chunk writes one)")
    for bad, why in ((args.pyg_extras, "--pyg-extras is not built for multi-machine "
                                       "partitioning yet: run it on one machine"),
                     (args.method == "kaminpar", "--method kaminpar is not built for "
                                                 "multi-machine partitioning: use metis or "
                                                 "random"),
                     (args.coarsen is False, "--no-coarsen: multi-machine partitioning always "
                                             "runs METIS on the label-propagation clustering "
                                             "(plain METIS needs the whole graph in one "
                                             "process)")):
        if bad:
            raise UsageError(why)
    try:
        budget = parse_size(args.memory_budget or DEFAULT_RANK_BUDGET)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    ctx = DistContext.from_env()
    # collectives wait while rank 0 runs METIS; a dead or silent rank is caught by the
    # health watchdog's heartbeats instead of this timeout
    ctx = init_process_group("gloo", ctx=ctx, timeout=timedelta(
        seconds=max(ctx.rpc_timeout, DIST_COLLECTIVE_TIMEOUT_S)))
    comm = Comm(ctx.rank, ctx.world_size)
    start, error, partitioner = time.perf_counter(), None, None
    try:
        try:
            partitioner = DistPartitioner(args.input, args.num_parts, out, budget, comm=comm,
                                          method=args.method, seed=args.seed,
                                          overwrite=args.overwrite, progress=not args.quiet,
                                          allow_external_paths=args.allow_external_paths)
        except (ValueError, MissingDependencyError) as exc:
            error = exc
        comm.check("opening the input", error)
        meta = partitioner.generate()
    except (ValueError, MissingDependencyError, FileExistsError) as exc:
        health.report_failure(exc)
        if isinstance(exc, DisagreementError) or ctx.rank == 0 or exc is error:
            raise UsageError(str(exc)) from exc
        raise UsageError(f"rank {ctx.rank}: {exc}") from exc
    except PeerFailedError as exc:
        health.report_failure(exc)
        print(f"pyg-dist-partition (rank {ctx.rank}): error: {' '.join(str(exc).split())}",
              file=sys.stderr)
        return 1
    except BaseException as exc:
        health.report_failure(exc)
        raise
    health.report_done()
    if ctx.rank == 0:
        phases = partitioner.timings.phases_s
        print(f"partitioned {args.input} into {meta.num_parts} part(s) with {meta.method} on "
              f"{ctx.world_size} ranks (memory budget {format_size(budget)} each) in "
              f"{time.perf_counter() - start:.1f}s -> {out} (uid {meta.uid})")
        print("phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items())
              + f"; rank 0 peak RSS {format_size(peak_rss_bytes())}")
        print(summary_table(meta))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return run_main(run, "pyg-dist-partition", argv)


if __name__ == "__main__":
    sys.exit(main())
