"""Sampling benchmark: local sampler throughput, distributed seeds/s with features, and
remote feature fetch bandwidth.

Settings (``--setting``, default ``all``):

- ``local``: sampled edges/s of the full 3-hop pipeline (kernel, dedupe, relabel) on
  one partition, one thread, on a uniform random graph (``--graph random``: 1M nodes,
  20M edges) and/or a community graph (``--graph community``). Reference: pyg-lib's
  C++ ``neighbor_sample`` draws 3.4M edges/s on one thread on the random graph.
- ``dist``: seeds/s and sampled nodes/s *with features* on a 200k-node community
  graph, 1 partition (1 process, no RPC) and 2 METIS partitions (2 processes sampling
  their own seeds concurrently), and the remote feature fetch bandwidth against a
  plain ``index_select`` of the same bytes. Reference: ``torch_geometric.distributed``
  did 4.5-5.4k seeds/s combined on 2 partitions. Every batch is also timed with the
  same features fetched *without* original ids (same seeds, interleaved): the
  difference is what returning original ids costs (``*_original_ids_cost_pct``). Then
  loader construction from original ids and the translation table's memory on an
  ``--ids-nodes`` graph (``benchmarks/translation.py``).

Graphs and partitions are cached under ``--cache-dir`` so reruns start quickly.
Prints human-readable lines, then ONE JSON line with every number.

Example:
    python benchmarks/sampling.py --setting local --graph random
"""
from __future__ import annotations

import argparse
import cProfile
import io as _io
import json
import os
import pstats
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

PYG_LIB_EDGES_PER_S = 3.4e6
TARGET_SEEDS_PER_S = 15e3
TARGET_RATIO = 0.5
TARGET_FETCH_RATIO = 0.25
COARSEN_EDGES = 50_000_000  # above this, partitioned() coarsens before METIS
ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class BenchConfig:
    """What to run (see ``--help`` for every field)."""
    fanout: List[int]
    batch_size: int
    batches: int
    warmup: int
    fetch_ids: int
    fetch_repeats: int
    seed: int
    timeout: float


# ---- graphs and partitions (cached) ---------------------------------------------------
def random_graph(num_nodes: int, num_edges: int, seed: int):
    """A uniform random directed graph (no features: the local figure samples only)."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    return Data(edge_index=edge_index, num_nodes=num_nodes)


def partitioned(cache: Path, kind: str, num_nodes: int, avg_degree: float, feat_dim: int,
                num_parts: int, seed: int) -> Path:
    """The partition folder of a synthetic graph, generated on first use.

    Args:
        cache (Path): cache folder.
        kind (str): ``"random"`` or ``"community"``.
        num_nodes (int): nodes; ``avg_degree * num_nodes`` directed edges.
        feat_dim (int): float features per node (community graphs only).
        num_parts (int): METIS partitions; graphs of more than :data:`COARSEN_EDGES` edges
            are partitioned by METIS on their label-propagation clusters
            (``coarsen=True``): plain METIS would need about 8x the adjacency's bytes
            (some 8 GB more for the products-scale graph's 120M edges), over what a
            small shared machine should give one job.
    """
    from pyg_dist import Partitioner
    from pyg_dist.datasets import community_graph

    root = cache / f"{kind}_n{num_nodes}_d{avg_degree:g}_f{feat_dim}_p{num_parts}_s{seed}"
    if (root / "META.json").exists():
        return root
    start = time.perf_counter()
    if kind == "random":
        data = random_graph(num_nodes, int(num_nodes * avg_degree), seed)
    else:
        data = community_graph(num_nodes, avg_degree, feat_dim, seed=seed)
    coarsen = True if num_nodes * avg_degree > COARSEN_EDGES and num_parts > 1 else None
    Partitioner(data, num_parts, root, seed=seed, overwrite=True, progress=False,
                coarsen=coarsen).generate()
    print(f"  partitioned {root.name} in {time.perf_counter() - start:.1f}s", flush=True)
    return root


def report(line: Dict[str, object], results_file: Optional[str]) -> None:
    """Prints ``line`` as one JSON line and appends it to ``benchmarks/results/<file>``
    (``None``: print only)."""
    text = json.dumps(line)
    if results_file is not None:
        folder = Path(__file__).resolve().parent / "results"
        folder.mkdir(exist_ok=True)
        with open(folder / results_file, "a") as f:
            f.write(text + "\n")
    print(text)


def machine_info() -> Dict[str, object]:
    """Where and when a benchmark ran: host, CPU model and count, memory, UTC date and the
    load average at the time (figures from a shared machine are read as ratios)."""
    import platform
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"machine": f"{platform.node()}: {model or platform.machine()}, "
                       f"{os.cpu_count()} cpus, {mem:.0f} GiB",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_avg": [round(v, 2) for v in os.getloadavg()]}


# ---- the job run in every process ------------------------------------------------------
def open_sampler(root: str, cfg: BenchConfig):
    from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore

    torch.set_num_threads(1)
    ctx = DistContext.from_env(rpc_timeout=cfg.timeout)
    from pyg_dist.format import _partition_io as io
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    sampler = DistNeighborSampler(data, num_neighbors=cfg.fanout, current_ctx=ctx,
                                  seed=cfg.seed + ctx.rank)
    return ctx, sampler


def seed_batches(sampler, cfg: BenchConfig, rank: int) -> List[torch.Tensor]:
    owned = sampler.graph.owned_nodes()
    g = torch.Generator().manual_seed(cfg.seed * 1000 + rank)
    perm = owned[torch.randperm(owned.numel(), generator=g)]
    need = (cfg.warmup + cfg.batches) * cfg.batch_size
    perm = perm.repeat((need + perm.numel() - 1) // perm.numel())[:need]
    return list(perm.split(cfg.batch_size))


def _barrier(ctx) -> None:
    if ctx.is_distributed:
        import torch.distributed as dist
        dist.barrier()


async def one_batch(sampler, seeds: torch.Tensor, fetcher,
                     prof: Optional[cProfile.Profile], rng: np.random.Generator):
    """Samples (and fetches features of, with ``fetcher``) one batch on the sampler's
    loop thread; returns the subgraph and the rows (freed by the caller, untimed)."""
    if prof is not None:
        prof.enable()  # profiles this (the loop's) thread only
    try:
        sub = await sampler.sample_subgraph({sampler.meta.node_types[0]: seeds}, rng=rng)
        rows = await fetcher.fetch(sub.node, sub.edge, unique=False) if fetcher else None
        return sub, rows
    finally:
        if prof is not None:
            prof.disable()


def _fetchers(sampler, features: bool) -> Dict[str, Tuple[bool, object]]:
    """The variants timed on the same seeds, as ``(original ids, fetcher)``: hops and
    features with original ids (what loaders do: owners send edges' ids with the hop,
    nodes' with their rows), and, to price the ids, the same without them."""
    from pyg_dist.sampler import FeatureFetcher

    if not features:
        return {"": (True, None)}
    plain = FeatureFetcher(sampler.group, sampler.local, sampler.meta, original_ids=False)
    return {"": (True, sampler.fetcher), "_no_ids": (False, plain)}


def _run_batches(sampler, batches: List[torch.Tensor],
                 fetchers: Dict[str, Tuple[bool, object]],
                 prof: Optional[cProfile.Profile] = None) -> Dict[str, float]:
    """Every batch once per fetcher variant, interleaved in alternating order (the same
    load on each, neither always second with warm caches); the seconds of each variant
    are summed apart. Every variant samples the very same subgraph (one random stream
    per batch), and what a batch allocated is freed outside the timed section."""
    edges = nodes = 0
    seconds = {name: 0.0 for name in fetchers}
    cpu_s = {name: 0.0 for name in fetchers}
    laps: Dict[str, List[float]] = {name: [] for name in fetchers}
    for i, seeds in enumerate(batches):
        order = list(fetchers.items())
        for name, (ids, fetcher) in order if i % 2 == 0 else order[::-1]:  # neither runs warm
            sampler.original_ids = ids
            rng = np.random.default_rng([i, int(seeds[0])])
            start, cpu = time.perf_counter(), time.process_time()
            sub, rows = sampler.group.loop.run(one_batch(sampler, seeds, fetcher,
                                                         prof if name == "" else None, rng))
            laps[name].append(time.perf_counter() - start)
            seconds[name] += laps[name][-1]
            cpu_s[name] += time.process_time() - cpu
            counts = (sum(sum(v) for v in sub.num_sampled_edges.values()),
                      sum(v.numel() for v in sub.node.values()))
            del sub, rows
        edges, nodes = edges + counts[0], nodes + counts[1]
    out = {f"seconds{name}": value for name, value in seconds.items()}
    out.update({f"cpu_s{name}": value for name, value in cpu_s.items()})
    out.update({f"laps{name}": value for name, value in laps.items()})
    return {**out, "edges": edges,
            "nodes": nodes, "seeds": sum(b.numel() for b in batches), "batches": len(batches)}


def sampling_job(root: str, cfg: BenchConfig, features: bool, profile: bool) -> dict:
    """One process: sample (and fetch) its own seeds; rank 0 also measures fetch."""
    from pyg_dist.rpc import shutdown_rpc

    ctx, sampler = open_sampler(root, cfg)
    try:
        batches = seed_batches(sampler, cfg, ctx.rank)
        fetchers = _fetchers(sampler, features)
        _run_batches(sampler, batches[:cfg.warmup], fetchers)
        _barrier(ctx)
        prof = cProfile.Profile(time.thread_time) if profile else None
        out = _run_batches(sampler, batches[cfg.warmup:], fetchers, prof)
        if prof is not None:
            out["profile"] = _profile_text(prof)
        _barrier(ctx)
        if ctx.is_distributed and ctx.rank == 0 and cfg.fetch_ids > 0:
            out["fetch"] = fetch_bandwidth(sampler, cfg)
        _barrier(ctx)
        return out
    finally:
        shutdown_rpc()


def _profile_text(prof: cProfile.Profile, top: int = 25) -> str:
    buf = _io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(top)
    return buf.getvalue()


def fetch_bandwidth(sampler, cfg: BenchConfig) -> Dict[str, float]:
    """Remote fetch of ``cfg.fetch_ids`` random ids of the other partition vs a local
    ``index_select`` of as many random rows (same bytes, same process)."""
    from pyg_dist.sampler import FeatureFetcher

    node_type = sampler.meta.node_types[0]
    book = sampler.graph.node_book(node_type)
    other = 1 - sampler.group.part
    g = torch.Generator().manual_seed(cfg.seed)
    n = min(cfg.fetch_ids, book.size(other), book.size(sampler.group.part))
    remote = book.start(other) + torch.randperm(book.size(other), generator=g)[:n]
    fetcher = FeatureFetcher(sampler.group, sampler.local, sampler.meta,
                             node_attrs={node_type: ["x"]}, edge_attrs={})
    x = sampler.features.tensor(node_type, "x")
    rows = torch.randperm(x.size(0), generator=g)[:n]
    nbytes = n * x[0].numel() * x.element_size()
    fetch_s, local_s = [], []
    for _ in range(cfg.fetch_repeats):
        t = time.perf_counter()
        got = sampler.group.loop.run(fetcher.fetch({node_type: remote}, {}, unique=False))
        fetch_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        x.index_select(0, rows)
        local_s.append(time.perf_counter() - t)
    assert got.nodes[node_type]["x"].shape == (n, x.size(1))
    remote_gbs, local_gbs = nbytes / min(fetch_s) / 1e9, nbytes / min(local_s) / 1e9
    return {"bytes": nbytes, "remote_gb_s": remote_gbs, "index_select_gb_s": local_gbs,
            "ratio": remote_gbs / local_gbs}


# ---- settings ------------------------------------------------------------------------
def _launch(root: Path, world: int, cfg: BenchConfig, features: bool,
            profile: bool) -> List[dict]:
    from pyg_dist.testing import run_ranks

    return run_ranks(sampling_job, world, str(root), cfg, features, profile,
                     timeout=cfg.timeout, extra_env=ONE_THREAD, may_die=AFTER_REPORTING(world),
                     start_method="spawn")


def AFTER_REPORTING(world: int) -> range:  # noqa: N802  (reads as a constant)
    """Ranks whose numbers count even if the process then stalls at interpreter exit
    (torch RPC teardown under heavy load, seen on the base commit too): a benchmark
    reports what was measured; the tests still fail on such a stall."""
    return range(world)


def run_local(args: argparse.Namespace, cfg: BenchConfig) -> Dict[str, float]:
    """Sampled edges/s, 1 partition, 1 thread, no features."""
    results: Dict[str, float] = {}
    graphs = ["random", "community"] if args.graph == "both" else [args.graph]
    for kind in graphs:
        root = partitioned(args.cache_dir, kind, args.local_nodes, args.avg_degree,
                           args.feat_dim, 1, cfg.seed)
        out = _launch(root, 1, cfg, False, args.profile)[0]
        eps, bps = out["edges"] / out["seconds"], cfg.batches / out["seconds"]
        print(f"local/{kind}: {eps / 1e6:.2f}M sampled edges/s, {bps:.2f} batches/s "
              f"({out['edges'] / cfg.batches / 1e3:.0f}k edges/batch; pyg-lib reference "
              f"{PYG_LIB_EDGES_PER_S / 1e6:.1f}M/s on the random graph)", flush=True)
        if args.profile:
            print(out["profile"])
        results[f"local_{kind}_edges_per_s"] = round(eps)
        results[f"local_{kind}_batches_per_s"] = round(bps, 3)
    if "local_random_edges_per_s" in results:
        results["local_vs_pyg_lib"] = round(results["local_random_edges_per_s"]
                                            / PYG_LIB_EDGES_PER_S, 3)
    return results


def _rates(outs: List[dict], variant: str = "") -> Dict[str, float]:
    """Combined rates over processes (total work / slowest process's time) of one timed
    variant (``""``: with original ids, as loaders fetch)."""
    seconds = max(o[f"seconds{variant}"] for o in outs)
    return {"seeds_per_s": sum(o["seeds"] for o in outs) / seconds,
            "nodes_per_s": sum(o["nodes"] for o in outs) / seconds,
            "per_process_seeds_per_s": sum(o["seeds"] for o in outs) / seconds / len(outs),
            "cpu_ms_per_batch": 1e3 * sum(o[f"cpu_s{variant}"] for o in outs)
            / sum(o["batches"] for o in outs),
            "wall_ms_per_batch": 1e3 * seconds / outs[0]["batches"]}


def _paired_cost(outs: List[dict]) -> Tuple[float, float, float]:
    """What original ids add to a batch, from each batch's own pair (the same seeds timed
    with and without them, back to back): the median and quartiles of the per-batch
    ratios, in percent. Unlike the ratio of sums, one batch slowed by something else on
    the machine (a collection, another process) moves it little."""
    ratios = np.array([a / b for o in outs for a, b in zip(o["laps"], o["laps_no_ids"])])
    q1, med, q3 = np.percentile(100 * (ratios - 1), [25, 50, 75])
    return round(float(med), 2), round(float(q1), 2), round(float(q3), 2)


def run_dist(args: argparse.Namespace, cfg: BenchConfig) -> Dict[str, float]:
    """Seeds/s with features on 1 and 2 partitions, and remote fetch bandwidth."""
    res: Dict[str, float] = {}
    per_process = {}
    for parts in (1, 2):
        root = partitioned(args.cache_dir, "community", args.dist_nodes, args.avg_degree,
                           args.feat_dim, parts, cfg.seed)
        outs = _launch(root, parts, cfg, True, args.profile)
        rates = _rates(outs)
        per_process[parts] = rates["per_process_seeds_per_s"]
        print(f"dist/{parts} partition(s): {rates['seeds_per_s']:.0f} seeds/s combined, "
              f"{rates['nodes_per_s'] / 1e3:.0f}k sampled nodes/s with features "
              f"({rates['per_process_seeds_per_s']:.0f} seeds/s per process; per batch "
              f"{rates['wall_ms_per_batch']:.0f} ms wall, {rates['cpu_ms_per_batch']:.0f} ms "
              f"CPU of each process, all threads)", flush=True)
        if args.profile:
            print(outs[0]["profile"])
        res[f"dist_{parts}p_seeds_per_s"] = round(rates["seeds_per_s"])
        res[f"dist_{parts}p_cpu_ms_per_batch"] = round(rates["cpu_ms_per_batch"], 2)
        res[f"dist_{parts}p_nodes_per_s"] = round(rates["nodes_per_s"])
        plain = _rates(outs, "_no_ids")
        res[f"dist_{parts}p_seeds_per_s_no_ids"] = round(plain["seeds_per_s"])
        res[f"dist_{parts}p_original_ids_cost_pct"] = round(
            100 * (1 - rates["seeds_per_s"] / plain["seeds_per_s"]), 2)
        res[f"dist_{parts}p_original_ids_cpu_cost_pct"] = round(
            100 * (rates["cpu_ms_per_batch"] / plain["cpu_ms_per_batch"] - 1), 2)
        med, q1, q3 = _paired_cost(outs)
        res[f"dist_{parts}p_original_ids_cost_pct_median"] = med
        res[f"dist_{parts}p_original_ids_cost_pct_quartiles"] = [q1, q3]
        print(f"dist/{parts} partition(s): original ids in batches cost "
              f"{res[f'dist_{parts}p_original_ids_cost_pct']:.2f}% of seeds/s (wall; "
              f"{plain['seeds_per_s']:.0f} seeds/s without them, same seeds, interleaved), "
              f"{res[f'dist_{parts}p_original_ids_cpu_cost_pct']:.2f}% more CPU per batch; "
              f"per batch pair: median {med:.2f}%, quartiles {q1:.2f}% / {q3:.2f}%",
              flush=True)
        if "fetch" in outs[0]:
            res.update(_report_fetch(outs[0]["fetch"]))
    if args.ids_nodes > 0:
        res.update(run_translation(args, cfg))
    res["dist_2p_per_process_ratio"] = round(per_process[2] / per_process[1], 3)
    print(f"dist: 2-partition per-process / 1-partition throughput = "
          f"{res['dist_2p_per_process_ratio']:.2f} (target >= {TARGET_RATIO})", flush=True)
    return res


def run_translation(args: argparse.Namespace, cfg: BenchConfig) -> Dict[str, float]:
    """Loader construction from original ids, and the translation table's memory, on
    2 partitions of an ``--ids-nodes`` graph (see ``benchmarks/translation.py``)."""
    from pyg_dist.testing import run_ranks
    from translation import report, translation_job

    root = partitioned(args.cache_dir, "community", args.ids_nodes, args.ids_avg_degree,
                       args.ids_feat_dim, 2, cfg.seed)
    outs = run_ranks(translation_job, 2, str(root), cfg.fanout, cfg.batch_size, cfg.timeout,
                     timeout=cfg.timeout, extra_env=ONE_THREAD, may_die=AFTER_REPORTING(2),
                     start_method="spawn")
    return report(outs, args.ids_nodes)


def _report_fetch(fetch: Dict[str, float]) -> Dict[str, float]:
    print(f"fetch: remote {fetch['remote_gb_s']:.2f} GB/s vs index_select "
          f"{fetch['index_select_gb_s']:.2f} GB/s of {fetch['bytes'] / 1e6:.0f} MB: ratio "
          f"{fetch['ratio']:.3f} (target >= {TARGET_FETCH_RATIO})", flush=True)
    return {"fetch_remote_gb_s": round(fetch["remote_gb_s"], 3),
            "fetch_index_select_gb_s": round(fetch["index_select_gb_s"], 3),
            "fetch_ratio": round(fetch["ratio"], 3)}


def targets(res: Dict[str, float]) -> Dict[str, bool]:
    checks = {"local_edges_per_s": ("local_random_edges_per_s", PYG_LIB_EDGES_PER_S),
              "dist_seeds_per_s": ("dist_2p_seeds_per_s", TARGET_SEEDS_PER_S),
              "dist_ratio": ("dist_2p_per_process_ratio", TARGET_RATIO),
              "fetch_ratio": ("fetch_ratio", TARGET_FETCH_RATIO)}
    return {f"target_{name}": bool(res[key] >= bound)
            for name, (key, bound) in checks.items() if key in res}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--setting", choices=["local", "dist", "all"], default="all")
    p.add_argument("--graph", choices=["random", "community", "both"], default="both",
                   help="graph(s) of the local setting")
    p.add_argument("--local-nodes", type=int, default=1_000_000)
    p.add_argument("--dist-nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=float, default=20.0)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=20, help="timed batches per process")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--ids-nodes", type=int, default=2_400_000,
                   help="dist: nodes of the graph whose loader construction from original "
                        "ids and translation memory are measured (0: skip)")
    p.add_argument("--ids-avg-degree", type=float, default=4.0)
    p.add_argument("--ids-feat-dim", type=int, default=4)
    p.add_argument("--fetch-ids", type=int, default=100_000)
    p.add_argument("--fetch-repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--profile", action="store_true", help="print a cProfile of rank 0")
    p.add_argument("--cache-dir", type=Path,
                   default=Path(tempfile.gettempdir()) / "pyg_dist_bench")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    cfg = BenchConfig([int(f) for f in args.fanout.split(",")], args.batch_size, args.batches,
                      args.warmup, args.fetch_ids, args.fetch_repeats, args.seed, args.timeout)
    print(f"config: {asdict(cfg)}, cache {args.cache_dir}", flush=True)
    res: Dict[str, object] = {"fanout": args.fanout, "batch_size": cfg.batch_size}
    if args.setting in ("local", "all"):
        res.update(run_local(args, cfg))
    if args.setting in ("dist", "all"):
        res.update(run_dist(args, cfg))
    res.update(targets(res))  # type: ignore[arg-type]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
