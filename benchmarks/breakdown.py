"""Where a batch's time goes, next to what the memory system bounds it by.

The same batches are run three ways in one process (per rank):

1. the full loader (``DistNeighborLoader``, fan-out 15,10,5, batch 1024, in-process
   sampling), its stage times read from ``loader.stats()`` one batch at a time;
2. the sampling kernel alone (``sample_one_hop``, drawing the edges' original ids as the
   loader does) over the very frontiers the loader's batch had at each hop, each
   owner's share on that owner's partition (the other partition of this machine read
   from its files, as the loader reads it);
3. ``torch.index_select(x, 0, idx, out=buf)`` of the batch's feature rows into one
   reused buffer.

``bound = kernel + gather`` is what a batch costs if nothing but drawing edges and
copying rows took time. 2 and 3 run batch by batch (one batch's kernel, then its
gather, then the next batch's), as the loader runs them, so each meets the caches the
other left; they are also run each in a loop of its own (``*_alone``), where each keeps
its own data hot: on a machine whose cache holds much of the feature table that bound
is one no loader reaches. Each round runs the loader pass, then both bound passes, over
the same batches (the loader's epoch is fixed, so every round draws the same batches);
rounds repeat to even out a noisy machine. Also measured: what the
stage timing itself costs (the same batches sampled and fetched with and without a
record, interleaved in alternating order).

Graphs: the sampling benchmark's 200k-node community graph (``benchmarks/sampling.py``
builds and caches it) on 1 and 2 partitions; ``--products`` adds a products-scale
synthetic graph (2.4M nodes, average degree 50, 100 float32 features; generating and
partitioning it takes long and ~10 GB of memory).

Prints human-readable lines, then ONE JSON line (with the machine, the date and the load
average at the start and the end); appends that line to
``benchmarks/results/breakdown.json`` and draws a stacked bar chart of every
configuration's stages and its bound (``--plot``, default
``benchmarks/results/breakdown.png``).

Example:
    python benchmarks/breakdown.py                   # ~3 minutes on 2 busy cores
    python benchmarks/breakdown.py --products --parts 1
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sampling as bench  # noqa: E402  (its graphs, seeds and batch loop)
from png_chart import stacked_bars  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
STAGES = ("sample", "dedupe", "fetch_own", "fetch_direct", "fetch_remote", "fetch_other",
          "collate")
GRAPHS = {"community_200k": (200_000, 20.0), "products_2.4m": (2_400_000, 50.0)}


def _loader(root: str, cfg: bench.BenchConfig):
    from pyg_dist import DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore
    from pyg_dist.format import _partition_io as io
    from pyg_dist.store._original_ids import PartIds
    from pyg_dist._typing import HOMO_NODE

    torch.set_num_threads(1)
    ctx = DistContext.from_env(rpc_timeout=cfg.timeout)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    stores = (LocalFeatureStore.from_partition(root, pid),
              LocalGraphStore.from_partition(root, pid))
    seeds = PartIds.of_stores(*stores).table("node", HOMO_NODE).long()
    loader = DistNeighborLoader(data=stores, num_neighbors=cfg.fanout, input_nodes=seeds,
                                batch_size=cfg.batch_size, shuffle=True, seed=cfg.seed,
                                current_ctx=ctx)
    return ctx, loader


def loader_pass(loader, count: int) -> Dict[str, list]:
    """``count`` batches of epoch 0: each batch's stats and its frontiers."""
    loader.set_epoch(0)
    loader.stats(reset=True)
    out: Dict[str, list] = {"stats": [], "nodes": [], "hops": []}
    start = time.perf_counter()
    batches = iter(loader)
    for i, batch in enumerate(batches):
        out["stats"].append(loader.stats(reset=True).to_dict())
        out["nodes"].append(batch.part_n_id)
        out["hops"].append(list(batch.num_sampled_nodes))
        if i + 1 == count:
            break
    out["seconds"] = time.perf_counter() - start
    batches.close()  # the batches still in flight (a pass cut short)
    return out


def _owners(sampler, ids: torch.Tensor):
    """``(local rows, LocalSampler of the owner)`` per owner of ``ids`` (own, or read
    directly from its files on this machine)."""
    from pyg_dist.rpc._routing import split_by_owner

    node_type = sampler.meta.node_types[0]
    book = sampler.graph.node_book(node_type)
    out = []
    for part, pos in split_by_owner(ids, book.offsets, book.name):
        owner = sampler.local if part == sampler.group.part else \
            sampler.direct.sampler(part)
        out.append((book.to_local(part, ids[pos]), owner))
    return out


def _kernel(sampler, work, fanout: List[int], edge_type) -> float:
    """Milliseconds of the sampling kernel alone over one batch's frontiers."""
    from pyg_dist.sampler._sample_kernels import sample_one_hop

    start = time.perf_counter()
    for h, owners in work:
        for rows, owner in owners:
            csc = owner.graph.csc_by_type[edge_type]
            sample_one_hop(csc.indptr, csc.indices, rows, fanout[h], False, h,
                           edge_values=owner.ids.table("edge", edge_type))
    return 1e3 * (time.perf_counter() - start)


def _gather(owners, buf: torch.Tensor) -> float:
    """Milliseconds of ``index_select(..., out=)`` of one batch's rows into ``buf``."""
    start = time.perf_counter()
    at = 0
    for rows, x in owners:
        torch.index_select(x, 0, rows, out=buf[at:at + rows.numel()])
        at += rows.numel()
    return 1e3 * (time.perf_counter() - start)


def bound_pass(sampler, passes: Dict[str, list], fanout: List[int],
               interleaved: bool = True) -> Tuple[List[float], List[float]]:
    """Per batch, milliseconds of the sampling kernel alone over the frontiers the
    loader's batch had at each hop, and of ``index_select(..., out=)`` of its feature
    rows into one reused buffer.

    ``interleaved``: each batch's kernel, then its gather, then the next batch's, as the
    loader runs them, so each finds in the caches what the other left (the loader's
    conditions). Otherwise every kernel, then every gather: each loop keeps its own data
    hot, which a cache larger than the feature table turns into a bound no loader can
    reach (measured: the 80 MB table's gather 12 ms that way, 15-18 ms after a sweep
    of other memory, on a VM reporting 480 MiB of L3)."""
    node_type, edge_type = sampler.meta.node_types[0], sampler.meta.edge_types[0]
    width = sampler.features.tensor(node_type, "x").size(1)
    most = max(n.numel() for n in passes["nodes"])
    buf = torch.empty(most, width, dtype=torch.float32)
    buf.zero_()  # faulted in once, as a reused buffer is
    batches = []
    for nodes, hops in zip(passes["nodes"], passes["hops"]):
        ends = np.cumsum([0] + hops)
        work = [(h, _owners(sampler, nodes[ends[h]:ends[h + 1]])) for h in range(len(fanout))]
        rows = [(r, owner.column(node_type, "x")) for r, owner in _owners(sampler, nodes)]
        batches.append((work, rows))
    if interleaved:
        laps = [(_kernel(sampler, w, fanout, edge_type), _gather(r, buf)) for w, r in batches]
        return [k for k, _ in laps], [g for _, g in laps]
    kernel = [_kernel(sampler, w, fanout, edge_type) for w, _ in batches]
    return kernel, [_gather(r, buf) for _, r in batches]


def stats_cost(sampler, passes: Dict[str, list], batch_size: int) -> Dict[str, float]:
    """The same batches sampled and fetched with and without a stage record, back to back
    in alternating order: the median per-batch ratio, and the clock's cost per read."""
    from pyg_dist.sampler import _timing as timing

    async def one(seeds, rng, record: bool):
        if not record:
            return await bench.one_batch(sampler, seeds, sampler.fetcher, None, rng)
        with timing.recording() as times:
            await bench.one_batch(sampler, seeds, sampler.fetcher, None, rng)
        return times

    reads = [0]
    clock = timing.now_ns

    def counted() -> int:
        reads[0] += 1
        return clock()
    timing.now_ns = counted  # one batch with every clock read counted
    try:
        seeds = passes["nodes"][0][:batch_size]
        sampler.group.loop.run(one(seeds, np.random.default_rng([0, 7]), True))
    finally:
        timing.now_ns = clock
    ratios, batch_ms = [], []
    for i, nodes in enumerate(passes["nodes"]):
        seeds, lap = nodes[:batch_size], {}
        for record in ((True, False) if i % 2 else (False, True)):
            rng = np.random.default_rng([i, 7])
            start = time.perf_counter()
            sampler.group.loop.run(one(seeds, rng, record))
            lap[record] = time.perf_counter() - start
        ratios.append(lap[True] / lap[False])
        batch_ms.append(1e3 * lap[False])
    many = 200_000
    start = time.perf_counter_ns()
    for _ in range(many):
        time.perf_counter_ns()
    clock_ns = (time.perf_counter_ns() - start) / many
    return {"ratio_median": float(np.median(ratios)), "clock_ns": clock_ns,
            "reads_per_batch": reads[0],
            "estimate_pct": 100 * reads[0] * clock_ns / (1e6 * float(np.median(batch_ms)))}


def breakdown_job(root: str, cfg: bench.BenchConfig, rounds: int) -> dict:
    """One rank: ``rounds`` x (loader pass, kernel pass, gather pass), then the cost of
    the stage timing."""
    from pyg_dist.rpc import shutdown_rpc

    ctx, loader = _loader(root, cfg)
    sampler, count = loader.sampler, cfg.warmup + cfg.batches
    try:
        out: Dict[str, list] = {"stats": [], "kernel": [], "gather": [], "seconds": [],
                                "kernel_alone": [], "gather_alone": []}
        for _ in range(rounds):
            bench._barrier(ctx)
            passes = loader_pass(loader, count)
            bench._barrier(ctx)
            out["stats"] += passes["stats"][cfg.warmup:]
            out["seconds"].append(passes["seconds"] * cfg.batches / count)
            for key, interleaved in (("", True), ("_alone", False)):
                kernel, gather = bound_pass(sampler, passes, cfg.fanout, interleaved)
                out[f"kernel{key}"] += kernel[cfg.warmup:]
                out[f"gather{key}"] += gather[cfg.warmup:]
        bench._barrier(ctx)
        out["cost"] = stats_cost(sampler, passes, cfg.batch_size)
        bench._barrier(ctx)
        loader.close()
        return out
    finally:
        shutdown_rpc()


def summarize(outs: List[dict], cfg: bench.BenchConfig) -> Dict[str, object]:
    """Per-batch medians and means over every rank's batches, and the bound."""
    stats = [s for o in outs for s in o["stats"]]

    def ms(stage: str, how=statistics.median) -> float:
        return round(how([s["stages"][stage]["total_s"] * 1e3 for s in stats]), 2)
    kernel = [k for o in outs for k in o["kernel"]]
    gather = [g for o in outs for g in o["gather"]]
    bound = [k + g for k, g in zip(kernel, gather)]
    alone = [k + g for o in outs for k, g in zip(o["kernel_alone"], o["gather_alone"])]
    seeds = sum(s["seeds"] for s in stats)
    seconds = max(sum(o["seconds"]) for o in outs)
    res: Dict[str, object] = {
        "batch_ms_median": ms("produce"), "batch_ms_mean": ms("produce", statistics.mean),
        "stages_ms_mean": {s: ms(s, statistics.mean) for s in STAGES + ("kernel", "wait")},
        "stages_ms_median": {s: ms(s) for s in STAGES + ("kernel", "wait")},
        "kernel_ms_median": round(statistics.median(kernel), 2),
        "gather_ms_median": round(statistics.median(gather), 2),
        "bound_ms_median": round(statistics.median(bound), 2),
        "bound_ms_mean": round(statistics.mean(bound), 2),
        "kernel_alone_ms_median": round(statistics.median(
            k for o in outs for k in o["kernel_alone"]), 2),
        "gather_alone_ms_median": round(statistics.median(
            g for o in outs for g in o["gather_alone"]), 2),
        "bound_alone_ms_median": round(statistics.median(alone), 2),
        "seeds_per_s": round(seeds / seconds),
        "rows_per_batch": round(sum(sum(r["rows"] for r in s["rows"].values())
                                    for s in stats) / len(stats)),
        "stats_cost_pct_median": round(100 * (statistics.median(
            [o["cost"]["ratio_median"] for o in outs]) - 1), 2),
        "clock_ns": round(statistics.median(o["cost"]["clock_ns"] for o in outs), 1),
        "clock_reads_per_batch": outs[0]["cost"]["reads_per_batch"],
        "stats_cost_pct_estimate": round(max(o["cost"]["estimate_pct"] for o in outs), 4)}
    res["batch_over_bound"] = round(res["batch_ms_median"] / res["bound_ms_median"], 3)
    res["batch_over_bound_alone"] = round(
        res["batch_ms_median"] / res["bound_alone_ms_median"], 3)
    mean = res["stages_ms_mean"]
    res["other_ms_mean"] = round(res["batch_ms_mean"] - sum(mean[s] for s in STAGES), 2)
    return res


def _bars(res: Dict[str, dict]) -> list:
    bars = []
    for name, r in res.items():
        mean = r["stages_ms_mean"]
        loader = {s: mean[s] for s in STAGES if s != "sample"}
        loader["sample: kernel"] = mean["kernel"]
        loader["sample: rest"] = max(mean["sample"] - mean["kernel"], 0.0)
        loader["other"] = max(r["other_ms_mean"], 0.0)
        bars.append((f"{name} loader", loader))
        bars.append((f"{name} bound", {"bound: kernel": r["kernel_ms_median"],
                                       "bound: gather": r["gather_ms_median"]}))
    return bars


def plot(path: Path, res: Dict[str, dict]) -> str:
    segments = ["sample: kernel", "sample: rest", "dedupe", "fetch_own", "fetch_direct",
                "fetch_remote", "fetch_other", "collate", "other", "bound: kernel",
                "bound: gather"]
    stacked_bars(path, "BATCH MS (MEAN) BY STAGE VS KERNEL + GATHER", _bars(res), segments)
    return str(path)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="1,2", help="partition counts, e.g. 1,2")
    p.add_argument("--products", action="store_true",
                   help="also the products-scale graph (2.4M nodes, degree 50)")
    p.add_argument("--only-products", action="store_true")
    p.add_argument("--batches", type=int, default=12, help="timed batches per round")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/pyg_dist_bench"))
    p.add_argument("--plot", type=Path, default=RESULTS / "breakdown.png")
    p.add_argument("--no-save", action="store_true", help="do not append to results/")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    cfg = bench.BenchConfig([15, 10, 5], 1024, args.batches, args.warmup, 0, 0, args.seed,
                            900.0)
    graphs = ["products_2.4m"] if args.only_products else \
        ["community_200k"] + (["products_2.4m"] if args.products else [])
    res: Dict[str, dict] = {}
    start = bench.machine_info()  # machine, date and load average at the start
    for graph in graphs:
        nodes, degree = GRAPHS[graph]
        for parts in [int(p) for p in args.parts.split(",")]:
            root = bench.partitioned(args.cache_dir, "community", nodes, degree,
                                     args.feat_dim, parts, args.seed)
            outs = _launch(root, parts, cfg, args.rounds)
            r = res[f"{graph}_{parts}p"] = summarize(outs, cfg)
            print(f"{graph}, {parts} partition(s): batch {r['batch_ms_median']} ms (median), "
                  f"bound {r['bound_ms_median']} ms (kernel {r['kernel_ms_median']} + gather "
                  f"{r['gather_ms_median']}): {r['batch_over_bound']}x (each alone: "
                  f"{r['bound_alone_ms_median']} ms, {r['batch_over_bound_alone']}x); "
                  f"{r['seeds_per_s']} "
                  f"seeds/s; stage means {r['stages_ms_mean']}, other {r['other_ms_mean']}; "
                  f"stage timing costs {r['stats_cost_pct_median']}% per batch (median of "
                  f"interleaved pairs), {r['stats_cost_pct_estimate']}% by its "
                  f"{r['clock_reads_per_batch']} clock reads",
                  flush=True)
    line = {"benchmark": "breakdown", "fanout": "15,10,5", "batch_size": cfg.batch_size,
            "batches": args.batches, "rounds": args.rounds, **start, "results": res,
            "load_avg_end": bench.machine_info()["load_avg"]}
    try:
        line["plot"] = plot(args.plot, res)
    except OSError as exc:  # a benchmark reports what it measured
        line["plot"] = f"not written: {exc}"
    bench.report(line, None if args.no_save else "breakdown.json")


def _launch(root: Path, parts: int, cfg: bench.BenchConfig, rounds: int) -> List[dict]:
    from pyg_dist.testing import run_ranks

    return run_ranks(breakdown_job, parts, str(root), cfg, rounds, timeout=cfg.timeout,
                     extra_env=bench.ONE_THREAD, may_die=bench.AFTER_REPORTING(parts),
                     start_method="spawn")


if __name__ == "__main__":
    main()
