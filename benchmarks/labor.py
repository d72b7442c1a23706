"""LABOR vs neighbour sampling: what a batch costs, and what it learns.

Settings (``--setting``, default ``cost``):

- ``cost``: per batch, distinct nodes (per hop and in all), sampled edges, bytes
  gathered (every fetched attribute row, as the loaders fetch them) and seeds/s with
  features, for ``sampling_strategy="neighbor"`` and ``"labor"`` with the same fan-out
  (default 15,10,5, batch 1024), on 1 and 2 METIS partitions (``--parts``) of the
  200k-node community graph (``--graphs community``) and of a products-scale synthetic
  graph (``--graphs products``: 2.4M nodes, average degree 50, 100 float32 features;
  about 120M edges, big for a small shared machine). Both strategies sample the very
  same seeds in every process, batch by batch, in alternating order (interleaved: the
  same load on each).
- ``accuracy``: GraphSAGE on Cora (and CiteSeer where its raw files are found) over 3
  partitions, ``benchmarks/trainers/node_classification.py`` under torchrun, ``--runs`` seeds per
  strategy: mean and standard deviation of the test accuracy.

Graphs and partitions are cached under ``--cache-dir``. Prints human-readable lines, a
small PNG plot of distinct nodes per hop when matplotlib is installed (``--plot``; the
benchmark runs without it), then ONE JSON line (with the machine, the date and the load
average), also appended to ``benchmarks/results/labor.jsonl`` unless ``--no-save``.

Example:
    python benchmarks/labor.py --graphs community --batches 10
    python benchmarks/labor.py --setting accuracy --planetoid /path/to/planetoid
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling import (AFTER_REPORTING, ONE_THREAD, BenchConfig, machine_info, report,  # noqa: E402
                      partitioned, seed_batches)


#: the variants timed: name -> DistNeighborSampler options
VARIANTS = {"neighbor": {}, "labor": {"sampling_strategy": "labor"},
            "labor_dep": {"sampling_strategy": "labor", "layer_dependency": True}}
STRATEGIES = ("neighbor", "labor")  # what the accuracy setting trains with
GRAPHS = {"community": (200_000, 20.0), "products": (2_400_000, 50.0)}


def _samplers(root: str, cfg: BenchConfig):
    from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore
    from pyg_dist.format import _partition_io as io

    torch.set_num_threads(1)
    ctx = DistContext.from_env(rpc_timeout=cfg.timeout)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    return ctx, {name: DistNeighborSampler(data, num_neighbors=cfg.fanout, current_ctx=ctx,
                                           seed=cfg.seed, **options)
                 for name, options in VARIANTS.items()}


async def _batch(sampler, seeds: torch.Tensor, rng: np.random.Generator):
    sub = await sampler.sample_subgraph({sampler.meta.node_types[0]: seeds}, rng=rng)
    rows = await sampler.fetcher.fetch(sub.node, sub.edge, unique=False)
    return sub, rows


def _nbytes(rows) -> int:
    return sum(int(t.numel() * t.element_size()) for group in (rows.nodes, rows.edges)
               for attrs in group.values() for t in attrs.values())


def cost_job(root: str, cfg: BenchConfig) -> Dict[str, dict]:
    """One process: both strategies on the same seeds, interleaved; per strategy the
    seconds, and per batch nodes per hop, edges and bytes."""
    from sampling import _barrier

    from pyg_dist.rpc import shutdown_rpc

    ctx, samplers = _samplers(root, cfg)
    try:
        batches = seed_batches(samplers["neighbor"], cfg, ctx.rank)
        out = {s: {"seconds": 0.0, "hops": [], "edges": [], "bytes": [], "seeds": 0}
               for s in VARIANTS}
        for i, seeds in enumerate(batches):
            if i == cfg.warmup:
                _barrier(ctx)
            order = list(VARIANTS) if i % 2 == 0 else list(VARIANTS)[::-1]
            for name in order:
                sampler, rng = samplers[name], np.random.default_rng([i, ctx.rank])
                start = time.perf_counter()
                sub, rows = sampler.group.loop.run(_batch(sampler, seeds, rng))
                took = time.perf_counter() - start
                if i < cfg.warmup:
                    continue
                rec = out[name]
                rec["seconds"] += took
                rec["seeds"] += seeds.numel()
                rec["hops"].append([sum(v[h] for v in sub.num_sampled_nodes.values())
                                    for h in range(len(cfg.fanout) + 1)])
                rec["edges"].append(sum(sum(v) for v in sub.num_sampled_edges.values()))
                rec["bytes"].append(_nbytes(rows))
                del sub, rows
        _barrier(ctx)
        return out
    finally:
        shutdown_rpc()


def _summary(outs: List[Dict[str, dict]], name: str) -> Dict[str, object]:
    recs = [o[name] for o in outs]
    hops = np.array([h for r in recs for h in r["hops"]], dtype=np.float64)
    seconds = max(r["seconds"] for r in recs)
    return {"nodes_per_batch": round(float(hops.sum(1).mean())),
            "nodes_per_hop": [round(float(v)) for v in hops.mean(0)],
            "edges_per_batch": round(float(np.mean([e for r in recs for e in r["edges"]]))),
            "mb_per_batch": round(float(np.mean([b for r in recs for b in r["bytes"]])) / 1e6,
                                  2),
            "seeds_per_s": round(sum(r["seeds"] for r in recs) / seconds)}


def run_cost(args: argparse.Namespace, cfg: BenchConfig) -> Dict[str, object]:
    from pyg_dist.testing import run_ranks

    res: Dict[str, object] = {}
    for graph in args.graphs.split(","):
        nodes, degree = GRAPHS[graph]
        if graph == "products" and args.products_nodes:
            nodes = args.products_nodes  # the same degree on fewer nodes (a smaller machine)
        for parts in args.parts:
            root = partitioned(args.cache_dir, "community", nodes, degree, args.feat_dim,
                               parts, cfg.seed)
            outs = run_ranks(cost_job, parts, str(root), cfg, timeout=cfg.timeout,
                             extra_env=ONE_THREAD, may_die=AFTER_REPORTING(parts),
                             start_method="spawn")
            outs = [o for o in outs if o is not None]
            got = {s: _summary(outs, s) for s in VARIANTS}
            key = f"{graph}_{parts}p"
            for s, summary in got.items():
                res.update({f"{key}_{s}_{k}": v for k, v in summary.items()})
                print(f"{key} {s:9s}: {summary['nodes_per_batch']} nodes/batch "
                      f"{summary['nodes_per_hop']} per hop, {summary['edges_per_batch']} "
                      f"edges, {summary['mb_per_batch']} MB gathered, "
                      f"{summary['seeds_per_s']} seeds/s", flush=True)
            n, lab = got["neighbor"], got["labor"]
            res[f"{key}_fewer_nodes_x"] = round(n["nodes_per_batch"] / lab["nodes_per_batch"], 3)
            res[f"{key}_fewer_bytes_x"] = round(n["mb_per_batch"] / lab["mb_per_batch"], 3)
            res[f"{key}_seeds_per_s_x"] = round(lab["seeds_per_s"] / n["seeds_per_s"], 3)
            dep = got["labor_dep"]
            res[f"{key}_dep_fewer_nodes_x"] = round(n["nodes_per_batch"] / dep["nodes_per_batch"],
                                                    3)
            res[f"{key}_dep_seeds_per_s_x"] = round(dep["seeds_per_s"] / n["seeds_per_s"], 3)
            print(f"{key}: LABOR has {res[f'{key}_fewer_nodes_x']}x fewer nodes, "
                  f"{res[f'{key}_fewer_bytes_x']}x fewer bytes, "
                  f"{res[f'{key}_seeds_per_s_x']}x the seeds/s (layer_dependency: "
                  f"{res[f'{key}_dep_fewer_nodes_x']}x fewer nodes, "
                  f"{res[f'{key}_dep_seeds_per_s_x']}x the seeds/s)", flush=True)
    return res


# ---- accuracy: GraphSAGE on Planetoid graphs over 3 partitions ---------------------------
def _train(args: argparse.Namespace, root: Path, strategy: str, seed: int) -> float:
    from pyg_dist.testing import free_port

    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=3",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}",
           str(repo / "benchmarks" / "trainers" / "node_classification.py"), "--partition-dir", str(root),
           "--epochs", str(args.epochs), "--batch-size", "64", "--num-neighbors",
           args.acc_fanout, "--hidden", "64", "--lr", "0.01", "--seed", str(seed),
           "--normalize-features", "--sampling-strategy", strategy, "--log-every", "1000"]
    env = {**os.environ, **ONE_THREAD}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"training failed ({done.returncode}): {done.stderr[-2000:]}")
    return float(json.loads(lines[-1])["test_acc"])


def _planetoid_parts(args: argparse.Namespace, name: str) -> Optional[Path]:
    if not (Path(args.planetoid) / name / "raw").is_dir():
        print(f"accuracy: no {name} raw files under {args.planetoid}: skipped", flush=True)
        return None
    root = args.cache_dir / f"{name.lower()}_p3_s{args.seed}"
    if not (root / "META.json").exists():
        repo = Path(__file__).resolve().parents[1]
        subprocess.run([sys.executable, str(repo / "scripts" / "partition_graph.py"),
                        "--dataset", name, "--root", str(args.planetoid), "--num-parts", "3",
                        "--out", str(root), "--seed", str(args.seed), "--overwrite"],
                       check=True, capture_output=True)
    return root


def run_accuracy(args: argparse.Namespace) -> Dict[str, object]:
    res: Dict[str, object] = {}
    for name in args.datasets.split(","):
        root = _planetoid_parts(args, name)
        if root is None:
            continue
        for strategy in STRATEGIES:
            accs = [_train(args, root, strategy, seed) for seed in range(args.runs)]
            key = f"{name.lower()}_{strategy}"
            res[f"{key}_test_acc_mean"] = round(float(np.mean(accs)), 4)
            res[f"{key}_test_acc_std"] = round(float(np.std(accs, ddof=1)), 4)
            res[f"{key}_test_acc"] = [round(a, 4) for a in accs]
            print(f"{name} {strategy:8s}: test accuracy {np.mean(accs):.4f} +- "
                  f"{np.std(accs, ddof=1):.4f} over {len(accs)} seeds {accs}", flush=True)
        diff = abs(res[f"{name.lower()}_labor_test_acc_mean"] -
                   res[f"{name.lower()}_neighbor_test_acc_mean"])
        res[f"{name.lower()}_within_one_std"] = bool(
            diff <= res[f"{name.lower()}_neighbor_test_acc_std"])
    return res


# ---- the plot and the command line ------------------------------------------------------
def plot(res: Dict[str, object], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: matplotlib is not installed: skipped", flush=True)
        return
    keys = sorted({k.rsplit("_neighbor_", 1)[0] for k in res if "_neighbor_nodes_per_hop" in k})
    if not keys:
        return
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for s in VARIANTS:
            ax.plot(res[f"{key}_{s}_nodes_per_hop"], marker="o", label=s)
        ax.set(title=key, xlabel="hop", ylabel="distinct nodes / batch", yscale="log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"plot: {path}", flush=True)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--setting", choices=["cost", "accuracy", "all"], default="cost")
    p.add_argument("--cache-dir", type=Path,
                   default=Path(tempfile.gettempdir()) / "pyg_dist_bench")
    p.add_argument("--graphs", default="community",
                   help="comma-separated: community (200k nodes), products (2.4M, degree 50)")
    p.add_argument("--products-nodes", type=int, default=0,
                   help="nodes of the products-like graph (0: 2.4M, as ogbn-products)")
    p.add_argument("--parts", default="1,2", help="partition counts (cost), e.g. 2")
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=10, help="timed batches per process")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--planetoid", default="/work/shared/data/planetoid",
                   help="folder with <Name>/raw/ind.* (Planetoid layout)")
    p.add_argument("--datasets", default="Cora,CiteSeer")
    p.add_argument("--runs", type=int, default=5, help="seeds per strategy (accuracy)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--acc-fanout", default="10,5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--plot", type=Path, default=None, help="PNG of nodes per hop")
    p.add_argument("--no-save", action="store_true", help="do not append to results/")
    args = p.parse_args(argv)
    args.parts = [int(n) for n in args.parts.split(",")]
    args.cache_dir.mkdir(parents=True, exist_ok=True)  # graphs and partitions, reused
    return args


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    cfg = BenchConfig([int(f) for f in args.fanout.split(",")], args.batch_size, args.batches,
                      args.warmup, 0, 0, args.seed, args.timeout)
    res: Dict[str, object] = {"fanout": args.fanout, "batch_size": args.batch_size,
                              **machine_info()}
    if args.setting in ("cost", "all"):
        res.update(run_cost(args, cfg))
        if args.plot is not None:
            plot(res, args.plot)
    if args.setting in ("accuracy", "all"):
        res.update(run_accuracy(args))
    res["load_avg_end"] = machine_info()["load_avg"]
    report(res, None if args.no_save else "labor.jsonl")


if __name__ == "__main__":
    main()
