"""Benchmark: which partitioner? pymetis, our coarsen path and KaMinPar, side by side.

Graphs (each as the undirected, loop-free CSR the partitioners take, built once with
:func:`pyg_dist.partition._graph_kernels.symmetric_csr` and cached under ``--cache-dir``):

- ``cora``: the real Cora graph (2,708 nodes) from ``../shared/data/planetoid``;
- ``community200k``: ``community_graph(200_000, 20)`` (~2M undirected edges);
- ``products``: ``community_graph(2_400_000, 51.6667)``, ogbn-products scale
  (124M directed edges, ~62M undirected);
- ``products-pl``: the same with power-law degrees (``power_law=2.5``: hubs of
  thousands, a heavy tail like ogbn-products'); not in the default list.

Partitioners (all with unit vertex weights: KaMinPar balances one vertex weight only,
so the single-constraint case is measured for all):

- ``metis``: ``pymetis.part_graph`` on the whole graph (recursive bisection up to 8
  parts, as :class:`pyg_dist.Partitioner` calls it); single-threaded;
- ``coarsen``: our path: size-constrained label propagation, pymetis on the cluster
  graph, projection and greedy refinement (``coarsen.cluster/contract/refine``);
  single-threaded numba;
- ``kaminpar``: KaMinPar's default context; ``kaminpar-terapart``: its
  memory-efficient context (graph held compressed); 1 and 2 threads; the time
  includes writing the temporary ParHIP file KaMinPar's binding reads.

Each run is a fresh process that loads the cached CSR, resets its peak-RSS mark
(``/proc/self/clear_refs``), partitions, and reports: ``wall_s``; ``peak_rss_gb``
(VmHWM from the reset: the input CSR plus the partitioner's working memory) and
``extra_gb`` (that peak minus the RSS right before the call); ``cut_pct`` (undirected
edges cut, % of all); ``balance`` (largest part / mean) and ``train_balance`` (the
same for the 10% train nodes, which no run here constrains). Human-readable lines
first, then ONE JSON line.

Example:
    python benchmarks/partitioners.py                       # all graphs, 2 and 4 parts
    python benchmarks/partitioners.py --graphs cora,community200k --parts 4
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from partition import _can_reset_peak, _status_gb  # noqa: E402  (same measurement)
GRAPHS = {"cora": None, "community200k": (200_000, 20.0, 0.0),
          "products": (2_400_000, 2 * 62_000_000 / 2_400_000, 0.0),
          "products-pl": (2_400_000, 2 * 62_000_000 / 2_400_000, 2.5)}
METHODS = ("metis", "coarsen", "kaminpar", "kaminpar-terapart")
SHARED_CORA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "planetoid"


# ---- graphs -----------------------------------------------------------------------------
def _load_graph(name: str):
    if name == "cora":
        from pyg_dist.datasets._loading import load_planetoid

        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(SHARED_CORA / "Cora", Path(tmp) / "Cora")
            return load_planetoid(tmp, "Cora")
    from pyg_dist.datasets import community_graph

    nodes, degree, power_law = GRAPHS[name]
    return community_graph(nodes, degree, feat_dim=1, num_classes=47, seed=0,
                           power_law=power_law)


def prepare(name: str, cache: Path) -> Path:
    """The cached CSR of one graph (built in a child process on first use)."""
    folder = cache / f"partitioners_{name}"
    if not (folder / "done").exists():
        start = time.perf_counter()
        subprocess.run([sys.executable, os.path.abspath(__file__), "--prepare", name,
                        "--cache-dir", str(cache)], check=True)
        print(f"  built the CSR of {name} in {time.perf_counter() - start:.0f}s", flush=True)
    return folder


def _prepare_worker(name: str, cache: Path) -> None:
    from pyg_dist.partition._graph_kernels import EdgeBlock, symmetric_csr

    data = _load_graph(name)
    index = data.edge_index.numpy()
    n = int(data.num_nodes)
    xadj, adjncy = symmetric_csr([EdgeBlock(index[0], index[1], 0, 0)], n)
    train = data.train_mask.numpy()
    del data, index
    folder = cache / f"partitioners_{name}"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "xadj.npy", xadj)
    np.save(folder / "adjncy.npy", adjncy)
    np.save(folder / "train.npy", train)
    (folder / "done").write_text("ok\n")


# ---- one run ----------------------------------------------------------------------------
def _partition(method: str, xadj: np.ndarray, adjncy: np.ndarray, train: np.ndarray,
               parts: int, threads: int, seed: int, phases: Dict[str, float]) -> np.ndarray:
    n = xadj.shape[0] - 1
    if method == "metis":
        from pyg_dist.partition._assign import _part_graph

        return _part_graph(parts, seed, xadj, adjncy, None, np.ones((n, 1), dtype=np.int64))
    if method == "coarsen":
        from pyg_dist.partition._assign import CLUSTERS_PER_PART, _part_graph
        from pyg_dist.partition._coarsen import cluster, contract, refine

        start = time.perf_counter()
        labels, k = cluster(xadj, adjncy, -(-n // (CLUSTERS_PER_PART * parts)), seed)
        coarse = contract(xadj, adjncy, labels, k, np.ones((n, 1), dtype=np.int64))
        phases["coarsen"], start = time.perf_counter() - start, time.perf_counter()
        out = _part_graph(parts, seed, *coarse)[labels]
        phases["metis"], start = time.perf_counter() - start, time.perf_counter()
        refine(out, xadj, adjncy, np.zeros(n, dtype=np.int64), train, parts)
        phases["refine"] = time.perf_counter() - start
        return out
    from pyg_dist.partition._kaminpar_assign import kaminpar_parts

    context = "terapart" if method == "kaminpar-terapart" else "default"
    return kaminpar_parts(xadj, adjncy, parts, seed, context, threads, phases=phases)


def _warm_numba(method: str) -> None:
    """Compiles (or loads from cache) the numba kernels outside the timed span."""
    if method == "coarsen":
        from pyg_dist.partition._coarsen import cluster, contract, refine

        xadj, adj = np.array([0, 1, 2]), np.array([1, 0])
        labels, k = cluster(xadj, adj, 2, 0)
        contract(xadj, adj, labels, k, np.ones((2, 1), dtype=np.int64))
        refine(np.array([0, 1]), xadj, adj, np.zeros(2, dtype=np.int64),
               np.zeros(2, dtype=bool), 2)


def worker(args: argparse.Namespace) -> dict:
    folder = Path(args.graph)
    xadj = np.load(folder / "xadj.npy")
    adjncy = np.load(folder / "adjncy.npy")
    train = np.load(folder / "train.npy")
    # every import (torch comes with pyg_dist) and numba compile before the timed span,
    # the same for every method, so neither counts as the run's time or memory
    import kaminpar  # noqa: F401
    import pymetis  # noqa: F401

    import pyg_dist.partition._assign  # noqa: F401
    import pyg_dist.partition._kaminpar_assign  # noqa: F401
    _warm_numba(args.method)
    before = _status_gb("VmRSS")
    can_reset = _can_reset_peak()
    phases: Dict[str, float] = {}
    start = time.perf_counter()
    parts = _partition(args.method, xadj, adjncy, train, args.parts, args.threads, args.seed,
                       phases)
    wall = time.perf_counter() - start
    peak = _status_gb("VmHWM") if can_reset else None
    row = np.repeat(np.arange(xadj.shape[0] - 1), np.diff(xadj))
    cut = int(np.count_nonzero(parts[row] != parts[adjncy]))
    sizes = np.bincount(parts, minlength=args.parts)
    train_sizes = np.bincount(parts[train], minlength=args.parts)
    return {"wall_s": wall, "peak_rss_gb": peak,
            "extra_gb": None if peak is None else peak - before, "input_rss_gb": before,
            "cut_pct": 100.0 * cut / max(adjncy.shape[0], 1),
            "balance": float(sizes.max() / sizes.mean()),
            "train_balance": float(train_sizes.max() / max(train_sizes.mean(), 1e-9)),
            "empty_parts": int((sizes == 0).sum()), "phases_s": phases}


def run_one(args: argparse.Namespace, folder: Path, method: str, parts: int, threads: int
            ) -> Optional[dict]:
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--graph", str(folder),
            "--method", method, "--parts", str(parts), "--threads", str(threads),
            "--seed", str(args.seed)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=env,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout}s"}
    if proc.returncode != 0:
        return {"error": f"exit code {proc.returncode} (-9: out of memory)"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _line(graph: str, r: dict) -> str:
    head = f"{graph:>14} {r['method']:>18} k={r['parts']} t={r['threads']}"
    if "error" in r:
        return f"{head}: {r['error']}"
    return (f"{head}: cut {r['cut_pct']:6.2f}%  balance {r['balance']:.3f}  train "
            f"{r['train_balance']:.3f}  wall {r['wall_s']:7.2f}s  peak {r['peak_rss_gb']:.2f} "
            f"GB (+{r['extra_gb']:.2f} over input)  "
            + " ".join(f"{k} {v:.2f}s" for k, v in r["phases_s"].items()))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", default="cora,community200k,products",
                   help=f"comma-separated, from {', '.join(GRAPHS)}")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--parts", default="2,4")
    p.add_argument("--threads", default="1,2",
                   help="thread counts for KaMinPar (pymetis and coarsen run with 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/pyg_dist_bench"))
    p.add_argument("--prepare", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--graph", default=None, help=argparse.SUPPRESS)
    p.add_argument("--method", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: Optional[List[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    if args.prepare:
        return _prepare_worker(args.prepare, args.cache_dir)
    if args.worker:
        args.parts, args.threads = int(args.parts), int(args.threads)
        print(json.dumps(worker(args)), flush=True)
        return
    results = []
    for graph in args.graphs.split(","):
        folder = prepare(graph, args.cache_dir)
        n = int(np.load(folder / "xadj.npy", mmap_mode="r").shape[0] - 1)
        m = int(np.load(folder / "adjncy.npy", mmap_mode="r").shape[0] // 2)
        print(f"{graph}: {n:,} nodes, {m:,} undirected edges", flush=True)
        for parts in (int(k) for k in args.parts.split(",")):
            for method in args.methods.split(","):
                threads = [int(t) for t in args.threads.split(",")] \
                    if method.startswith("kaminpar") else [1]
                for t in threads:
                    r = {"graph": graph, "nodes": n, "edges": m, "method": method,
                         "parts": parts, "threads": t,
                         **run_one(args, folder, method, parts, t)}
                    results.append(r)
                    print(_line(graph, r), flush=True)
    rounded = [{k: (round(v, 4) if isinstance(v, float) else
                    {a: round(b, 3) for a, b in v.items()} if isinstance(v, dict) else v)
                for k, v in r.items()} for r in results]
    print(json.dumps({"bench": "partitioners", "vertex_weights": "unit (single constraint)",
                      "gb": "GiB", "results": rounded}))


if __name__ == "__main__":
    main()
