"""Where the per-batch cost of original ids goes: sampled edges' ids or nodes' ids.

One process, one partition of the sampling benchmark's 200k-node community graph
(``benchmarks/sampling.py`` builds and caches it; 15,10,5 fan-outs, batch 1024, 100
float features). Every batch is sampled and its features fetched four times, on the same
seeds and random stream, in rotating order: with no original ids, with edges' only
(read in the sampling kernel at each drawn position), with nodes' only (one more column
of the rows fetched) and with both (what loaders do). Reported: the median and quartiles
of each variant's per-batch time over the same batch's time without ids, in percent.
Then one hop alone (``sample_one_hop`` on random seeds), with and without reading edge ids.

Human-readable lines first, then ONE JSON line.

Example:
    python benchmarks/original_ids.py               # ~2 minutes
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sampling as bench  # noqa: E402  (its graphs, sampler and batch loop)

VARIANTS = ("none", "edges", "nodes", "both")
for _name, _value in bench.ONE_THREAD.items():  # as the sampling benchmark's processes
    os.environ.setdefault(_name, _value)  # (numba reads it when pyg_dist imports it)


def _batches(sampler, cfg: bench.BenchConfig) -> Dict[str, List[float]]:
    from pyg_dist.sampler import FeatureFetcher

    plain = FeatureFetcher(sampler.group, sampler.local, sampler.meta, original_ids=False)
    ways = {"none": (False, plain), "edges": (True, plain), "nodes": (False, sampler.fetcher),
            "both": (True, sampler.fetcher)}
    laps: Dict[str, List[float]] = {name: [] for name in VARIANTS}
    for i, seeds in enumerate(bench.seed_batches(sampler, cfg, 0)):
        for name in VARIANTS[i % 4:] + VARIANTS[:i % 4]:  # none always first or last
            sampler.original_ids, fetcher = ways[name]
            rng = np.random.default_rng([i, int(seeds[0])])
            start = time.perf_counter()
            sub, rows = sampler.group.loop.run(bench.one_batch(sampler, seeds, fetcher,
                                                               None, rng))
            if i >= cfg.warmup:
                laps[name].append(time.perf_counter() - start)
            del sub, rows
    return laps


def _hops(sampler) -> List[Dict[str, float]]:
    from pyg_dist.sampler._sample_kernels import sample_one_hop

    edge_type = sampler.meta.edge_types[0]
    csc = sampler.local.graph.csc_by_type[edge_type]
    table = sampler.local.ids.table("edge", edge_type)
    nodes = sampler.local.graph.node_book(edge_type[2]).size(0)
    rng = np.random.default_rng(1)
    out = []
    for num_seeds, fanout in ((1024, 15), (15_000, 10), (150_000, 5)):
        seeds = torch.from_numpy(rng.integers(0, nodes, num_seeds))
        ms = {}
        for name, values in (("no_ids_ms", None), ("ids_ms", table)):
            laps = []
            for k in range(15):
                start = time.perf_counter()
                sample_one_hop(csc.indptr, csc.indices, seeds, fanout, False, k,
                               edge_values=values)
                laps.append(time.perf_counter() - start)
            ms[name] = round(float(np.median(laps)) * 1e3, 2)
        out.append({"seeds": num_seeds, "fanout": fanout, **ms})
    return out


def main(argv: Optional[List[str]] = None) -> None:
    from pyg_dist.rpc import shutdown_rpc

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=200_000)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/pyg_dist_bench"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    root = bench.partitioned(args.cache_dir, "community", args.num_nodes, 20.0, 100, 1, 0)
    cfg = bench.BenchConfig([15, 10, 5], 1024, args.batches, 3, 0, 0, 0, 600.0)
    _, sampler = bench.open_sampler(str(root), cfg)
    try:
        laps = _batches(sampler, cfg)
        hops = _hops(sampler)
    finally:
        shutdown_rpc()
    base = np.array(laps["none"])
    res: Dict[str, object] = {"benchmark": "original_ids", "batches": args.batches,
                              "none_ms_median": round(float(np.median(base)) * 1e3, 1)}
    for name in VARIANTS[1:]:
        pct = 100 * (np.array(laps[name]) / base - 1)
        q1, med, q3 = (round(float(v), 2) for v in np.percentile(pct, [25, 50, 75]))
        print(f"{name}: median {med:+.2f}% per batch (quartiles {q1:+.2f}% / {q3:+.2f}%)")
        res[f"{name}_cost_pct_median"], res[f"{name}_cost_pct_quartiles"] = med, [q1, q3]
    for hop in hops:
        print(f"one hop, {hop['seeds']} random seeds, fan-out {hop['fanout']}: "
              f"{hop['no_ids_ms']} ms, {hop['ids_ms']} ms reading edge ids")
    res["hops"] = hops
    print(json.dumps(res))


if __name__ == "__main__":
    main()
