"""Benchmark: METIS partitioning of a synthetic graph at ogbn-products scale.

Default graph: 2,400,000 nodes, 62,000,000 undirected edges (both directions stored,
124,000,000 directed), 100 float32 features, labels and split masks
(:func:`pyg_dist.datasets._synthetic.community_graph`). Each ``--num-parts`` value
runs in a fresh subprocess that builds the graph, partitions it with
:class:`pyg_dist.Partitioner` into a temporary folder (deleted afterwards) and
reports:

- ``wall_s``: wall time of ``Partitioner(...)`` plus ``.generate()``,
- ``metis_s``: time inside the ``pymetis.part_graph`` call only (``0`` with
  ``--method kaminpar``, whose own steps are in ``phases``),
- ``outside_metis_s``: ``wall_s - metis_s`` (adjacency build, relabelling, writing),
- ``cpu_s``: user + system CPU seconds of the worker over the same span (a check on
  wall times taken on a busy, shared machine),
- ``peak_rss_gb``: peak resident memory of the *whole* worker process over its whole
  life: interpreter and torch, graph building and partitioning together,
- ``input_gb``: bytes of every tensor of the input ``Data`` (``edge_index``, ``x``,
  ``y``, the masks),
- ``rss_ratio``: ``peak_rss_gb / input_gb``,
- ``peak_in_metis_gb`` / ``peak_outside_metis_gb``: peak RSS (whole process) during
  the ``pymetis.part_graph`` call / during the rest of the partitioning; ``null``
  where ``VmHWM`` cannot be reset through ``/proc/self/clear_refs``.

GB here means GiB (2**30 bytes). Targets: ``outside_metis_s <= metis_s`` and
``rss_ratio <= 3``. Human-readable lines first, then one JSON line with every setting.

Example:
    python benchmarks/partition.py                          # full scale, 2 and 4 parts
    python benchmarks/partition.py --num-nodes 300000 --num-parts 2
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

GIB = 2 ** 30
DEFAULT_NODES = 2_400_000
DEFAULT_DEGREE = 2 * 62_000_000 / DEFAULT_NODES  # 62M undirected edges at 2.4M nodes


@dataclass
class RunResult:
    """What one worker measured for one ``num_parts``."""
    num_parts: int
    num_edges: int
    wall_s: float
    metis_s: float
    outside_metis_s: float
    peak_rss_gb: float
    input_gb: float
    rss_ratio: float
    cpu_s: float
    peak_outside_metis_gb: Optional[float]
    peak_in_metis_gb: Optional[float]
    build_s: float
    rss_before_build_gb: float
    rss_after_build_gb: float
    build_peak_rss_gb: float
    phases_s: Dict[str, float]
    cut_pct: float


def _status_gb(field: str) -> float:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in GiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / GIB
    raise RuntimeError(f"/proc/self/status has no {field}")


def _can_reset_peak() -> bool:
    """Whether ``VmHWM`` can be reset through ``/proc/self/clear_refs`` (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakLog:
    """Peak RSS per segment of this process's life (segments end at :meth:`mark`).

    Where ``VmHWM`` can be reset, each segment's peak is read and the mark resets it
    (the reset also resets ``ru_maxrss``, which is why the whole-process peak is the
    maximum over segments). Elsewhere only the whole-process peak is known.
    """

    def __init__(self) -> None:
        self.can_reset = _can_reset_peak()
        self.peaks: Dict[str, float] = {}

    def mark(self, segment: str) -> None:
        peak = _status_gb("VmHWM")
        self.peaks[segment] = max(self.peaks.get(segment, 0.0), peak)
        if self.can_reset:
            _can_reset_peak()

    def whole(self) -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # KiB
        return max([usage, _status_gb("VmHWM"), *self.peaks.values()])

    def segment(self, name: str) -> Optional[float]:
        """Peak of a segment, ``None`` where it did not happen or cannot be told apart."""
        return self.peaks.get(name) if self.can_reset else None


@contextmanager
def _marking_metis(log: PeakLog) -> Iterator[None]:
    """Marks a segment boundary right before and right after ``pymetis.part_graph``."""
    import pymetis

    original = pymetis.part_graph

    def part_graph(*args, **kwargs):
        log.mark("outside_metis")
        try:
            return original(*args, **kwargs)
        finally:
            log.mark("metis")

    pymetis.part_graph = part_graph
    try:
        yield
    finally:
        pymetis.part_graph = original


def _cpu_s() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _input_bytes(data) -> int:
    import torch
    return sum(v.numel() * v.element_size() for _, v in data.items() if torch.is_tensor(v))


def _partition(data, args: argparse.Namespace, log: PeakLog
               ) -> Tuple[float, float, object, float]:
    """Runs the partitioner into a temporary folder; returns wall s, CPU s, timings and
    the percentage of edges cut."""
    from pyg_dist import Partitioner

    with tempfile.TemporaryDirectory(prefix="pyg_dist_bench_", dir=args.tmp_dir) as tmp:
        with _marking_metis(log):
            cpu_start, start = _cpu_s(), time.perf_counter()
            partitioner = Partitioner(data, int(args.num_parts), Path(tmp) / "out",
                                      method=args.method, seed=args.seed, progress=False,
                                      coarsen=args.coarsen)
            meta = partitioner.generate()
            wall_s, cpu_s = time.perf_counter() - start, _cpu_s() - cpu_start
        log.mark("outside_metis")
    cut = sum(sum(p.cut_edges.values()) for p in meta.parts)
    edges = sum(sum(p.edges.values()) for p in meta.parts)
    return wall_s, cpu_s, partitioner.timings, 100.0 * cut / max(edges, 1)


def worker(args: argparse.Namespace) -> RunResult:
    """Builds the graph and partitions it once, in this (fresh) process.

    Args:
        args: parsed command line; ``args.num_parts`` holds exactly one value.
    """
    from pyg_dist.datasets import community_graph

    log = PeakLog()
    rss_before, start = _status_gb("VmRSS"), time.perf_counter()
    data = community_graph(args.num_nodes, args.avg_degree, args.feat_dim, args.num_classes,
                           seed=args.seed)
    build_s, rss_after = time.perf_counter() - start, _status_gb("VmRSS")
    log.mark("build")
    wall_s, cpu_s, timings, cut_pct = _partition(data, args, log)
    input_gb, peak = _input_bytes(data) / GIB, log.whole()
    return RunResult(
        num_parts=int(args.num_parts), num_edges=int(data.edge_index.size(1)), wall_s=wall_s,
        metis_s=timings.metis_s, outside_metis_s=wall_s - timings.metis_s, cpu_s=cpu_s,
        peak_rss_gb=peak, input_gb=input_gb, rss_ratio=peak / input_gb,
        peak_outside_metis_gb=log.segment("outside_metis"),
        peak_in_metis_gb=log.segment("metis"), build_s=build_s,
        rss_before_build_gb=rss_before, rss_after_build_gb=rss_after,
        build_peak_rss_gb=log.peaks["build"], phases_s=dict(timings.phases_s),
        cut_pct=cut_pct)


def _worker_argv(args: argparse.Namespace, num_parts: int) -> List[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--worker",
            "--num-parts", str(num_parts), "--num-nodes", str(args.num_nodes),
            "--avg-degree", repr(args.avg_degree), "--feat-dim", str(args.feat_dim),
            "--num-classes", str(args.num_classes), "--seed", str(args.seed),
            "--method", args.method] + (["--coarsen"] if args.coarsen else [])
    return argv + (["--tmp-dir", args.tmp_dir] if args.tmp_dir else [])


def run_one(args: argparse.Namespace, num_parts: int) -> RunResult:
    """Runs :func:`worker` in a fresh interpreter and parses its JSON line."""
    proc = subprocess.run(_worker_argv(args, num_parts), stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker for num_parts={num_parts} exited with {proc.returncode} "
                           f"(a negative code is a signal; -9 is usually out of memory)")
    return RunResult(**json.loads(proc.stdout.strip().splitlines()[-1]))


def _gb(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f} GB"


def _describe(r: RunResult) -> str:
    """Human-readable lines for one setting."""
    time_ok = "ok" if r.outside_metis_s <= r.metis_s else "MISSED"
    rss_ok = "ok" if r.rss_ratio <= 3 else "MISSED"
    return (f"num_parts={r.num_parts}: wall {r.wall_s:.1f}s = METIS {r.metis_s:.1f}s + outside "
            f"{r.outside_metis_s:.1f}s [target outside <= METIS: {time_ok}]; CPU {r.cpu_s:.1f}s; "
            f"{r.cut_pct:.2f}% of edges cut\n"
            f"  peak RSS (whole process) {r.peak_rss_gb:.2f} GB = {r.rss_ratio:.2f}x input "
            f"{r.input_gb:.2f} GB [target <= 3x: {rss_ok}]; in METIS "
            f"{_gb(r.peak_in_metis_gb)}, rest of partitioning {_gb(r.peak_outside_metis_gb)}\n"
            f"  graph build {r.build_s:.1f}s, RSS {r.rss_before_build_gb:.2f} -> "
            f"{r.rss_after_build_gb:.2f} GB (peak {r.build_peak_rss_gb:.2f} GB)\n"
            f"  phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in r.phases_s.items()))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=DEFAULT_NODES)
    p.add_argument("--avg-degree", type=float, default=DEFAULT_DEGREE,
                   help="directed edges per node (both directions of each edge count)")
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--num-classes", type=int, default=47)
    p.add_argument("--num-parts", default="2,4", help="comma-separated partition counts")
    p.add_argument("--method", choices=["metis", "kaminpar", "random"], default="metis")
    p.add_argument("--coarsen", action="store_true",
                   help="METIS on a label-propagation clustering (Partitioner(coarsen=True))")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tmp-dir", default=None, help="where the temporary output goes")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Optional[List[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    if args.worker:
        print(json.dumps(asdict(worker(args))), flush=True)
        return
    counts = [int(k) for k in args.num_parts.split(",") if k.strip()]
    pairs = int(round(args.num_nodes * args.avg_degree / 2))
    print(f"graph: {args.num_nodes:,} nodes, ~{pairs:,} undirected edges "
          f"(~{2 * pairs:,} directed), {args.feat_dim} float32 features; method "
          f"{args.method}{' (coarsened)' if args.coarsen else ''}; each setting in a fresh process", flush=True)
    results = []
    for k in counts:
        results.append(run_one(args, k))
        print(_describe(results[-1]), flush=True)
    keys = ("num_parts", "wall_s", "metis_s", "outside_metis_s", "cpu_s", "peak_rss_gb",
            "input_gb", "rss_ratio", "peak_in_metis_gb", "peak_outside_metis_gb",
            "rss_before_build_gb", "build_s", "cut_pct")
    print(json.dumps({
        "bench": "partition", "nodes": args.num_nodes, "edges": results[0].num_edges,
        "feat_dim": args.feat_dim, "method": args.method, "coarsen": args.coarsen,
        "rss_counts": "peak RSS of the whole worker process (GiB) / GiB of all input tensors",
        "results": [{k: (round(v, 3) if isinstance(v, float) else v)
                     for k, v in asdict(r).items() if k in keys} for r in results]}))


if __name__ == "__main__":
    main()
