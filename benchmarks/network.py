"""Network benchmark: remote features over emulated cluster links.

A power-law community graph (default 1M nodes, 50M directed edges, 100 float32
features; degrees like ogbn-products': mean 50, median ~28, hubs of ~15k) is METIS-
partitioned into 2 and 3 parts. Each partition runs on its own emulated machine (a
network namespace with its own 198.18.0.x address, :mod:`tests.support.netns`),
one ``torchrun`` per machine, the links rate-limited with ``tc tbf`` in both
directions (``--rates``, default 10 Gb/s and 1 Gb/s, plus ``none``: the same namespaces
unlimited, i.e. loopback speed). In each job, one rank per machine:

- ``probe``: every rank at once fetches ``--probe-mb`` of uncached remote feature
  rows (random remote ids, in fetches of ``--probe-rows`` rows): the achieved remote
  feature bandwidth and its ratio to the link rate (``bw_ratio``; the physical limit
  is 1), with and without bfloat16 on the wire, and where a request spends its time:
  ``wire_s`` (the bytes at the link rate) and ``not_wire_s`` (the rest: the owner's
  gather, ``gather_s``, measured locally on as many own rows, serialisation, copies,
  TensorPipe, scheduling; on the unlimited link all of it);
- ``configs``: seeds/s of ``DistNeighborLoader`` (fan-out ``--fanout``, batch
  ``--batch-size``, features fetched, no model) and remote feature bytes per seed with
  no cache and with a cache of 5%, 10% and 20% of the remote nodes' rows (a byte budget
  of that many rows, ranked by the halo's edge counts), each with and without
  bfloat16 on the wire. ``speedup`` is seeds/s over the no-cache run of the same wire
  type, ``vs_plain`` over the no-cache float32 run, ``bytes_cut`` the fraction of
  remote bytes per seed saved. With ``--repeats 2`` every configuration runs again
  in reverse order (figures combined; ``spread`` is the faster run over the slower);
- ``predict``: which ranking predicts the rows fetched better, on the no-cache run's
  batches: the cache chosen from the halo's edge counts (what ``feature_cache`` does)
  against one counted in a sampling pre-pass (the first quarter of the batches),
  against the best possible (counted on the very batches measured): hit rates of the
  remaining batches' remote rows for each budget.

Targets (1 Gb/s, 2 machines): a 10% cache cuts remote feature bytes per seed >= 50%
and raises seeds/s >= 1.5x over no cache; uncached fetches reach >= 0.7 of the link
rate. Writes a PNG of seeds/s against cache size for each link rate (``--plot``,
needs matplotlib). Needs root (network namespaces); says so in its JSON line
elsewhere. Graphs are cached under ``--cache-dir``. Human-readable lines first, then
ONE JSON line.

Example:
    python benchmarks/network.py                                 # full (~30 minutes)
    python benchmarks/network.py --num-nodes 100000 --machines 2 --rates 1gbit --batches 6
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support

ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
RATES = {"none": None, "10gbit": 10e9, "1gbit": 1e9, "100mbit": 100e6}


# ---- partition folders (cached) ------------------------------------------------------
def _build(root: str, num_nodes: int, avg_degree: float, feat_dim: int, parts: int,
           power_law: float) -> None:
    from pyg_dist import Partitioner
    from pyg_dist.datasets import community_graph

    data = community_graph(num_nodes, avg_degree, feat_dim, seed=0, power_law=power_law)
    Partitioner(data, parts, root, method="metis", coarsen=True, overwrite=True,
                progress=False).generate()


def folder(args: argparse.Namespace, parts: int) -> Path:
    from pyg_dist.testing import run_ranks

    root = args.cache_dir / (f"network_n{args.num_nodes}_d{args.avg_degree:g}_f{args.feat_dim}"
                             f"_pl{args.power_law:g}_p{parts}")
    if not (root / "META.json").exists():
        start = time.perf_counter()
        run_ranks(_build, 1, str(root), args.num_nodes, args.avg_degree, args.feat_dim, parts,
                  args.power_law, timeout=3600,
                  start_method="spawn")  # in a child: its memory is returned after
        print(f"  built {root.name} in {time.perf_counter() - start:.0f}s", flush=True)
    return root


# ---- one rank per emulated machine -----------------------------------------------------
def _barrier() -> None:
    import torch.distributed as dist

    from pyg_dist.rpc import _runtime as runtime
    dist.barrier(group=runtime.current().cpu_group)


def _probe(sampler: Any, rows: int, total_mb: float, rate: Optional[float]) -> Dict[str, Any]:
    """Fetches random uncached remote rows (all ranks at once): bandwidth and where the
    time goes."""
    meta, part = sampler.meta, sampler.group.part
    (node_type,) = meta.node_types
    book = meta.node_book(node_type)
    lo, hi, n = book.start(part), book.start(part) + book.size(part), meta.num_nodes[node_type]
    remote = torch.cat([torch.arange(0, lo), torch.arange(hi, n)])
    g = torch.Generator().manual_seed(part)
    fetcher = sampler.fetcher
    row_bytes = fetcher._bytes_per_row("nodes", node_type, fetcher.node_attrs[node_type])
    fetches = max(1, int(total_mb * 1e6 / (rows * row_bytes)))
    picks = [remote[torch.randint(0, remote.numel(), (rows,), generator=g)].unique()
             for _ in range(fetches + 1)]
    loop = sampler.group.loop
    loop.run(fetcher.fetch({node_type: picks[0]}, {}))  # warm (connections, allocator)
    _barrier()
    fetcher.stats.reset()
    start = time.perf_counter()
    for ids in picks[1:]:
        loop.run(fetcher.fetch({node_type: ids}, {}))
    fetch_s = time.perf_counter() - start
    got = fetcher.stats.reset()
    own = torch.randint(lo, hi, (sum(p.numel() for p in picks[1:]),), generator=g) - lo
    from pyg_dist.sampler._types import FeatureRequest
    request = FeatureRequest(nodes={node_type: own + lo}, node_attrs={node_type: fetcher.node_attrs[node_type]},
                             node_wire={node_type: dict(fetcher.wire.get(("nodes", node_type), {}))})
    start = time.perf_counter()
    sampler.local.features_of(request)
    gather_s = time.perf_counter() - start
    _barrier()
    wire_s = got.bytes * 8 / rate if rate else 0.0
    return {"rows": got.rows, "mb": round(got.bytes / 1e6, 1), "fetch_s": round(fetch_s, 3),
            "mb_per_s": round(got.bytes / fetch_s / 1e6, 1),
            "bw_ratio": round(wire_s / fetch_s, 3) if rate else None,
            "gather_s": round(gather_s, 3), "wire_s": round(wire_s, 3),
            "not_wire_s": round(fetch_s - wire_s, 3)}


def _loader_run(data: Any, ctx: Any, args: argparse.Namespace, seeds: torch.Tensor,
                budget: int, wire: Optional[str], record: bool) -> Dict[str, Any]:
    from pyg_dist import DistNeighborLoader

    start = time.perf_counter()
    loader = DistNeighborLoader(data, num_neighbors=args.fanout,
                                input_nodes=seeds[:args.batch_size * args.batches],
                                batch_size=args.batch_size, shuffle=False, current_ctx=ctx,
                                feature_cache=budget or None, wire_dtype=wire, seed=0)
    build_s = time.perf_counter() - start
    sampler, part = loader.sampler, loader.sampler.group.part
    book = sampler.meta.node_book(sampler.meta.node_types[0])
    lo, hi = book.start(part), book.start(part) + book.size(part)
    fetched: List[torch.Tensor] = []
    _barrier()
    sampler.fetcher.stats.reset()  # not the cache's own fetch
    cache = sampler.fetcher.cache
    if cache is not None:
        cache.reset_stats()
    start, count, nodes = time.perf_counter(), 0, 0
    for batch in loader:  # one epoch: every byte fetched belongs to its batches
        count += 1
        nodes += batch.num_nodes
        if record:
            fetched.append(batch.n_id[(batch.n_id < lo) | (batch.n_id >= hi)].clone())
    elapsed = time.perf_counter() - start
    stats = sampler.fetcher.stats.reset()
    seeds_done = count * args.batch_size
    out = {"seeds_per_s": round(seeds_done / elapsed, 1), "batches": count,
           "seconds": elapsed,
           "nodes_per_batch": round(nodes / max(count, 1)),
           "remote_kb_per_seed": round(stats.bytes / seeds_done / 1e3, 2),
           "remote_rows_per_seed": round(stats.rows / seeds_done, 2),
           "cache_mb": round(cache.nbytes / 1e6, 1) if cache else 0.0,
           "hit_rate": round(cache.stats.hit_rate, 3) if cache else 0.0,
           "build_s": round(build_s, 2)}
    _barrier()
    del loader
    return {**out, "_fetched": fetched} if record else out


def _combine(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Repeats of one configuration: seeds/s over their total time, the rest averaged."""
    seeds = sum(r["seeds_per_s"] * r["seconds"] for r in runs)
    out = {k: round(float(np.mean([r[k] for r in runs])), 3) for k in runs[0]
           if k not in ("seeds_per_s", "seconds")}
    return {**out, "seeds_per_s": round(seeds / sum(r["seconds"] for r in runs), 1),
            "spread": round(max(r["seeds_per_s"] for r in runs)
                            / min(r["seeds_per_s"] for r in runs), 3)}


def _predict(graph: Any, fetched: List[torch.Tensor], budgets: Dict[str, int],
             row_bytes: int) -> Dict[str, Any]:
    """Hit rates on the last 3/4 of the batches of caches ranked by halo edge counts,
    by a pre-pass over the first 1/4, and by the batches themselves (the best)."""
    from pyg_dist.sampler._cache.feature_cache import choose

    node_type = graph.meta.node_types[0]
    n = graph.meta.num_nodes[node_type]
    k = max(1, len(fetched) // 4)
    pre = torch.bincount(torch.cat(fetched[:k]), minlength=n)
    rest = torch.cat(fetched[k:])
    best = torch.bincount(rest, minlength=n)
    out: Dict[str, Any] = {"prepass_batches": k, "measured_batches": len(fetched) - k}
    for name, budget in budgets.items():
        rows = budget // row_bytes
        halo = choose(graph, {node_type: row_bytes}, budget).get(
            node_type, torch.empty(0, dtype=torch.long))
        top_pre = torch.argsort(pre, descending=True, stable=True)[:rows]
        top_pre = top_pre[pre[top_pre] > 0]
        top_best = torch.argsort(best, descending=True, stable=True)[:rows]

        def hit(ids: torch.Tensor) -> float:
            mask = torch.zeros(n, dtype=torch.bool)
            mask[ids] = True
            return round(float(mask[rest].float().mean()), 3) if rest.numel() else 0.0
        out[name] = {"halo": hit(halo), "prepass": hit(top_pre), "best": hit(top_best)}
    return out


def worker(args: argparse.Namespace) -> None:
    """One rank: the probe, every cache and wire configuration, the prediction; writes
    its figures to ``--result-dir``."""
    from pyg_dist import (DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore,
                          node_split, shutdown_rpc)
    from pyg_dist.format import _partition_io as io

    ctx = DistContext.from_env(rpc_timeout=300)
    root = str(args.root)
    meta = io.read_meta(root)
    pid = ctx.partition_id(meta.num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    rate = RATES[args.rate]
    result: Dict[str, Any] = {"rank": ctx.rank, "part": pid}
    try:
        seeds = node_split(data, "train", ctx)
        seeds = seeds[torch.randperm(seeds.numel(), generator=torch.Generator().manual_seed(pid))]
        (node_type,) = meta.node_types
        remote_nodes = meta.num_nodes[node_type] - meta.node_book(node_type).size(pid)
        row_bytes = args.feat_dim * 4
        result["probe"] = {}
        for wire in (None, "bf16"):
            sampler = DistNeighborSampler(data, num_neighbors=args.fanout, current_ctx=ctx,
                                          wire_dtype=wire)
            result["probe"][wire or "float32"] = _probe(sampler, args.probe_rows,
                                                        args.probe_mb, rate)
        budgets = {f"{c:g}": int(c * remote_nodes * row_bytes) for c in args.caches}
        _loader_run(data, ctx, argparse.Namespace(**{**vars(args), "batches": 2}), seeds, 0,
                    None, False)  # warm: kernels, connections, allocator
        plan = [(wire, name, budget) for wire in (None, "bf16") for name, budget in budgets.items()]
        runs: Dict[Any, List[Dict[str, Any]]] = {}
        # forward, then backward: drift over the run (other load, memory) cancels out
        for wire, name, budget in plan + plan[::-1] * (args.repeats > 1):
            record = wire is None and budget == 0 and "predict" not in result
            run = _loader_run(data, ctx, args, seeds, budget, wire, record)
            if record:
                result["predict"] = _predict(data[1], run.pop("_fetched"),
                                             {k: v for k, v in budgets.items() if v}, row_bytes)
            runs.setdefault((wire, name), []).append(run)
            print(f"  rank {ctx.rank}: cache {name} wire {wire}: {run}", flush=True)
        result["configs"] = [{"cache": float(name), "wire": wire or "float32",
                              **_combine(runs[(wire, name)])} for wire, name, _ in plan]
    finally:
        shutdown_rpc()
    path = Path(args.result_dir) / f"rank{ctx.rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)


# ---- the driver: emulated machines, one torchrun each ----------------------------------
def run_cluster(args: argparse.Namespace, root: Path, machines: int, rate: str,
                port: int) -> Dict[str, Any]:
    """Runs the workers on ``machines`` emulated machines at ``rate``; their figures."""
    from tests.support.netns import EmulatedCluster

    out = args.cache_dir / f"network_results_{machines}_{rate}"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.json"):
        old.unlink()
    script = [__file__, "--worker",
                   "--root", str(root), "--rate", rate, "--result-dir", str(out),
                   "--batches", str(args.batches), "--batch-size", str(args.batch_size),
                   "--probe-rows", str(args.probe_rows), "--probe-mb", str(args.probe_mb),
                   "--feat-dim", str(args.feat_dim), "--fanout", *map(str, args.fanout),
                   "--repeats", str(args.repeats),
                   "--caches", *map(str, args.caches)]
    start = time.perf_counter()
    with EmulatedCluster(machines, None if rate == "none" else rate) as cluster:
        procs = [cluster.popen(m, [sys.executable, "-m", "torch.distributed.run",
                                   f"--nnodes={machines}", f"--node-rank={m}",
                                   "--nproc-per-node=1", f"--master-addr={cluster.address(0)}",
                                   f"--master-port={port}", *script], env=ONE_THREAD)
                 for m in range(machines)]
        try:
            deadline = time.monotonic() + args.timeout
            codes = [proc.wait(timeout=max(deadline - time.monotonic(), 1)) for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    if any(codes):
        raise RuntimeError(f"{machines} machines at {rate}: workers exited with {codes}")
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(machines)]
    return summarize(ranks, machines, rate, time.perf_counter() - start)


def _mean(values: List[float]) -> float:
    return round(float(np.mean(values)), 3)


def summarize(ranks: List[Dict[str, Any]], machines: int, rate: str,
              wall_s: float) -> Dict[str, Any]:
    """Per configuration: seeds/s summed over machines, the rest averaged over ranks."""
    configs = []
    for i, first in enumerate(ranks[0]["configs"]):
        runs = [r["configs"][i] for r in ranks]
        configs.append({"cache": first["cache"], "wire": first["wire"],
                        "seeds_per_s": round(sum(c["seeds_per_s"] for c in runs), 1),
                        **{k: _mean([c[k] for c in runs]) for k in (
                            "remote_kb_per_seed", "remote_rows_per_seed", "hit_rate",
                            "cache_mb", "nodes_per_batch", "build_s", "spread")}})
    for c in configs:
        base = next(b for b in configs if b["wire"] == c["wire"] and b["cache"] == 0)
        c["speedup"] = round(c["seeds_per_s"] / base["seeds_per_s"], 3)
        c["bytes_cut"] = round(1 - c["remote_kb_per_seed"] / base["remote_kb_per_seed"], 3)
        plain = next(b for b in configs if b["wire"] == "float32" and b["cache"] == 0)
        c["vs_plain"] = round(c["seeds_per_s"] / plain["seeds_per_s"], 3)
    probe = {wire: {k: (_mean([r["probe"][wire][k] for r in ranks])
                        if ranks[0]["probe"][wire][k] is not None else None)
                    for k in ranks[0]["probe"][wire]} for wire in ranks[0]["probe"]}
    predict = {k: ({p: _mean([r["predict"][k][p] for r in ranks]) for p in v}
                   if isinstance(v, dict) else v) for k, v in ranks[0]["predict"].items()}
    return {"machines": machines, "rate": rate, "wall_s": round(wall_s, 1), "probe": probe,
            "configs": configs, "predict": predict}


def plot(results: List[Dict[str, Any]], path: Path) -> Optional[str]:
    """seeds/s against cache size, one panel per link rate; ``None`` or why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    rates = list(dict.fromkeys(r["rate"] for r in results))
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4), squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for r in (r for r in results if r["rate"] == rate):
            for wire, style in (("float32", "-o"), ("bf16", "--s")):
                pts = [c for c in r["configs"] if c["wire"] == wire]
                ax.plot([100 * c["cache"] for c in pts], [c["seeds_per_s"] for c in pts], style,
                        label=f"{r['machines']} machines, {wire} on the wire")
        ax.set_title(f"link {rate}" if rate != "none" else "unlimited (loopback speed)")
        ax.set_xlabel("feature cache (% of remote nodes)")
        ax.set_ylabel("seeds/s (all machines)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=1_000_000)
    p.add_argument("--avg-degree", type=float, default=50.0)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--power-law", type=float, default=2.5, help="degree exponent")
    p.add_argument("--machines", type=int, nargs="+", default=[2, 3])
    p.add_argument("--rates", nargs="+", default=["none", "10gbit", "1gbit"],
                   choices=sorted(RATES))
    p.add_argument("--caches", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2],
                   help="cache sizes as fractions of the remote nodes (0 first)")
    p.add_argument("--fanout", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=16, help="timed batches per configuration")
    p.add_argument("--repeats", type=int, default=2, choices=[1, 2],
                   help="2: every configuration again in reverse order, figures combined")
    p.add_argument("--probe-rows", type=int, default=50_000)
    p.add_argument("--probe-mb", type=float, default=100.0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per cluster run")
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/pyg_dist_bench"))
    p.add_argument("--plot", type=Path, default=Path("network.png"))
    # inside a machine
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--rate", default="none", help=argparse.SUPPRESS)
    p.add_argument("--result-dir", type=Path, help=argparse.SUPPRESS)
    return p


def _line(r: Dict[str, Any]) -> None:
    print(f"{r['machines']} machines, link {r['rate']} ({r['wall_s']:.0f}s):", flush=True)
    for wire, p in r["probe"].items():
        print(f"  probe {wire}: {p['mb_per_s']} MB/s per rank, bw_ratio {p['bw_ratio']}, "
              f"fetch {p['fetch_s']}s: wire at link rate {p['wire_s']}s, the rest "
              f"{p['not_wire_s']}s (owner's gather {p['gather_s']}s)", flush=True)
    for c in r["configs"]:
        print(f"  cache {c['cache']:>4} {c['wire']:>7}: {c['seeds_per_s']:>8} seeds/s "
              f"(x{c['speedup']}), {c['remote_kb_per_seed']} KB/seed remote "
              f"(-{100 * c['bytes_cut']:.0f}%), hit rate {c['hit_rate']}", flush=True)
    print(f"  predict: {r['predict']}", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    from tests.support.netns import exit_on_sigterm, remove_leftovers, unavailable

    reason = unavailable()
    if reason is not None:
        print(json.dumps({"benchmark": "network", "skipped": reason}))
        return 0
    if args.caches[0] != 0:
        args.caches = [0.0] + args.caches
    remove_leftovers()
    exit_on_sigterm()
    results, port = [], 29700
    for machines in args.machines:
        root = folder(args, machines)
        for rate in args.rates:
            port += 1
            results.append(run_cluster(args, root, machines, rate, port))
            _line(results[-1])
    why_not = plot(results, args.plot)
    print(json.dumps({"benchmark": "network", "num_nodes": args.num_nodes,
                      "avg_degree": args.avg_degree, "feat_dim": args.feat_dim,
                      "power_law": args.power_law, "fanout": args.fanout,
                      "batch_size": args.batch_size, "batches": args.batches,
                      "plot": str(args.plot) if why_not is None else why_not,
                      "results": results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
