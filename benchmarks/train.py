"""Benchmark: GraphSAGE training epochs through pyg_dist's loaders.

A synthetic community graph (default 500,000 nodes, average degree 10, 100 float
features, 10 classes, 10% of the nodes in the train split) is partitioned (METIS)
into 1 and 2 parts, cached under ``--cache-dir``. Then, for every partition count
and every ``--num-workers`` value, ``benchmarks/trainers/node_classification.py`` trains under
``torchrun`` (one trainer per partition, ``--skip-eval``) for ``--epochs`` epochs, run
through :mod:`tests.support.instrument` (which times the loader from outside the
unmodified example); its JSON line and the wrapper's figures are collected. Figures are
steady-state (epochs after the first):

- ``epoch_s``: seconds per epoch (every rank runs the same number of batches);
- ``batches_per_s``: batches per second per trainer;
- ``seeds_per_s``: training seeds per second, all trainers together;
- ``loader_wait_frac``: fraction of the epoch a trainer spent blocked waiting for
  its next batch (mean over ranks). Target: < 0.2 with ``num_workers >= 1``.

Every trainer uses one thread (``OMP_NUM_THREADS=1``); on a 2-core machine the
2-partition settings run 2 trainers (plus their sampler processes) on 2 cores.
Human-readable lines first, then ONE JSON line with every setting.

Example:
    python benchmarks/train.py                        # 500k nodes, 1 and 2 partitions
    python benchmarks/train.py --num-nodes 100000 --num-workers 1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository: tests.support
EXAMPLE = REPO / "benchmarks" / "trainers" / "node_classification.py"
INSTRUMENT = REPO / "tests" / "support" / "instrument.py"


def partitions(args: argparse.Namespace, num_parts: int) -> Path:
    """The graph partitioned into ``num_parts`` parts (built once, then reused)."""
    from pyg_dist import Partitioner
    from pyg_dist.datasets import community_graph
    from pyg_dist.format import _partition_io as io

    root = args.cache_dir / (f"sage_n{args.num_nodes}_d{args.avg_degree:g}_f{args.feat_dim}"
                             f"_s{args.seed}_p{num_parts}")
    if (root / io.META_FILE).exists():
        return root
    start = time.perf_counter()
    data = community_graph(args.num_nodes, avg_degree=args.avg_degree, feat_dim=args.feat_dim,
                           num_classes=args.num_classes, train=args.train_frac, seed=args.seed)
    Partitioner(data, num_parts, root, seed=args.seed, overwrite=True, progress=False).generate()
    print(f"partitioned {args.num_nodes} nodes / {data.num_edges} edges into {num_parts} "
          f"part(s) in {time.perf_counter() - start:.1f}s -> {root}", flush=True)
    return root


def train(args: argparse.Namespace, root: Path, num_parts: int, num_workers: int) -> Dict:
    """One torchrun job; returns its JSON line, with ``loader_wait_frac`` (mean over
    ranks) from the instrument wrapper."""
    from pyg_dist.testing import free_port
    from tests.support.instrument import read_reports

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
           f"--nproc-per-node={num_parts}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", "--max-restarts=0", str(INSTRUMENT), "--", str(EXAMPLE),
           "--partition-dir", str(root), "--epochs", str(args.epochs),
           "--batch-size", str(args.batch_size), "--num-neighbors", args.fanout,
           "--hidden", str(args.hidden), "--num-workers", str(num_workers), "--skip-eval",
           "--seed", str(args.seed)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"training failed (exit code {proc.returncode}): {' '.join(cmd)}\n"
                         f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1])
    waits = [r["loader_wait_frac"] for r in read_reports(proc.stdout).values()]
    result["loader_wait_frac"] = round(sum(waits) / len(waits), 4) if waits else None
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-nodes", type=int, default=500_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--train-frac", type=float, default=0.1)
    p.add_argument("--num-parts", default="1,2", help="comma-separated partition counts")
    p.add_argument("--num-workers", default="0,1", help="comma-separated sampler processes")
    p.add_argument("--epochs", type=int, default=3, help="the first one is warm-up")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanout", default="10,5")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per training job")
    p.add_argument("--cache-dir", type=Path,
                   default=Path(os.environ.get("TMPDIR", "/tmp")) / "pyg_dist_bench")
    args = p.parse_args()
    if args.epochs < 2:
        p.error("--epochs must be >= 2 (the first epoch is warm-up)")
    settings: List[Dict] = []
    for num_parts in (int(v) for v in args.num_parts.split(",")):
        root = partitions(args, num_parts)
        for num_workers in (int(v) for v in args.num_workers.split(",")):
            r = train(args, root, num_parts, num_workers)
            r["batches_per_s"] = round(r["batches_per_epoch"] / r["epoch_s"], 3)
            seeds = r["batches_per_s"] * args.batch_size * r["world_size"]
            row = {"num_parts": num_parts, "world_size": r["world_size"],
                   "num_workers": num_workers, "epoch_s": r["epoch_s"],
                   "batches_per_epoch": r["batches_per_epoch"],
                   "batches_per_s": r["batches_per_s"], "seeds_per_s": round(seeds, 1),
                   "loader_wait_frac": r["loader_wait_frac"],
                   "train_loss": r["train_loss"], "train_acc": r["train_acc"]}
            settings.append(row)
            print(f"parts={num_parts} workers={num_workers}: epoch {r['epoch_s']:.2f}s, "
                  f"{r['batches_per_s']:.2f} batches/s per trainer, {seeds:.0f} seeds/s, "
                  f"waiting on loader {100 * r['loader_wait_frac']:.1f}%", flush=True)
    with_workers = [s["loader_wait_frac"] for s in settings if s["num_workers"] >= 1]
    print(json.dumps({
        "benchmark": "train", "num_nodes": args.num_nodes, "avg_degree": args.avg_degree,
        "feat_dim": args.feat_dim, "batch_size": args.batch_size, "fanout": args.fanout,
        "hidden": args.hidden, "epochs": args.epochs, "cpus": os.cpu_count(),
        "settings": settings,
        "max_wait_frac_with_workers": max(with_workers) if with_workers else None,
        "target_wait_frac": 0.2}), flush=True)


if __name__ == "__main__":
    main()
