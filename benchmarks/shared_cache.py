"""Memory of the feature cache on one machine: one shared copy against one per process.

A machine serving two partitions of the network benchmark's graph (1M nodes, power-law
degrees, 100 float32 features; ``benchmarks/network.py`` builds and caches it) with
``--trainers`` trainers per partition, each with ``--workers`` sampler workers, direct
reads off (so the other partition is remote and worth caching, as on a real cluster).
Three configurations run one after the other: no cache, private caches
(``PYG_DIST_SHARED_CACHE=0``: every trainer and worker fetches and holds its own) and the
shared cache (one file per partition in ``/dev/shm``, mapped by all). Each trainer
samples ``--batches`` batches with features, then, with every process alive, rank 0
reads the memory of the whole machine's job:

- ``cgroup_mb``: the job's memory cgroup usage over its usage before the run (anonymous
  memory, ``/dev/shm`` files and page cache the run brought in; root only);
- ``pss_mb``: the sum of every trainer's and worker's PSS (``/proc/<pid>/smaps_rollup``);
- ``cache_mb``: the size of one partition's cache; ``copies``: the processes holding one.

``saved_mb`` is private over shared; the target is shared ~= (partitions) copies, private
~= (trainers + workers) copies. Human-readable lines first, then ONE JSON line.

Example:
    python benchmarks/shared_cache.py                   # ~3 minutes
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from network import folder  # noqa: E402  (the network benchmark's graph, cached)

CGROUP = Path("/sys/fs/cgroup/memory")


def _usage(group: Optional[str]) -> Optional[float]:
    if group is None:
        return None
    return int((CGROUP / group / "memory.usage_in_bytes").read_text()) / 1e6


def _job(root: str, fraction: float, workers: int, batches: int, group: Optional[str],
         base_mb: Optional[float]) -> Dict[str, Any]:
    import dataclasses

    import torch.distributed as dist

    from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                          shutdown_rpc)
    from pyg_dist.format import _partition_io as io
    from pyg_dist.rpc import _runtime as runtime
    from pyg_dist.memory import process_memory

    ctx = dataclasses.replace(DistContext.from_env(rpc_timeout=300), direct_reads=False)
    meta = io.read_meta(root)
    part = ctx.partition_id(meta.num_parts)
    data = (LocalFeatureStore.from_partition(root, part),
            LocalGraphStore.from_partition(root, part))
    (t,) = meta.node_types
    book = meta.node_book(t)
    ranks = ctx.ranks_of(part, meta.num_parts)
    seeds = torch.arange(book.start(part), book.start(part) + book.size(part))
    seeds = seeds[ranks.index(ctx.rank)::len(ranks)]
    try:
        loader = DistNeighborLoader(data, [15, 10, 5], input_nodes=seeds, batch_size=1024,
                                    shuffle=True, num_workers=workers, current_ctx=ctx,
                                    feature_cache=fraction or None)
        start = time.perf_counter()
        for i, _ in enumerate(loader):
            if i + 1 >= batches:
                break
        seconds = time.perf_counter() - start
        cache = loader.sampler.fetcher.cache
        pids = [os.getpid()] + ([p.pid for p in loader._pool.procs] if loader._pool else [])
        pss = sum(process_memory(str(p))["pss_mb"] or 0.0 for p in pids)
        dist.barrier(group=runtime.current().cpu_group)  # everyone alive and warm
        usage = _usage(group) if ctx.rank == 0 else None
        dist.barrier(group=runtime.current().cpu_group)
        loader.close()
        return {"pss_mb": pss, "processes": len(pids), "seconds": seconds,
                "cache_mb": cache.nbytes / 1e6 if cache else 0.0,
                "shared": bool(cache and cache.file),
                "cgroup_mb": None if usage is None else usage - base_mb}
    finally:
        shutdown_rpc()


def _run(args: argparse.Namespace, root: Path, config: str, group: Optional[str]) -> Dict[str, Any]:
    from pyg_dist.testing import run_ranks

    env = {"PYG_DIST_SHARED_CACHE": "0" if config == "private" else "1",
           "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    fraction = 0.0 if config == "none" else args.cache
    world = 2 * args.trainers
    results = run_ranks(_job, world, str(root), fraction, args.workers, args.batches, group,
                        _usage(group), timeout=900, extra_env=env, start_method="spawn")
    per_copy = [r["cache_mb"] for r in results]
    out = {"pss_mb": round(sum(r["pss_mb"] for r in results), 1),
           "cgroup_mb": None if results[0]["cgroup_mb"] is None else round(results[0]["cgroup_mb"], 1),
           "processes": sum(r["processes"] for r in results),
           "cache_mb": round(max(per_copy), 1), "shared": all(r["shared"] for r in results),
           "batch_s": round(max(r["seconds"] for r in results) / args.batches, 3)}
    print(f"  {config:8s} PSS sum {out['pss_mb']:8.1f} MB  cgroup {out['cgroup_mb']} MB  "
          f"{out['processes']} processes, cache {out['cache_mb']} MB per partition", flush=True)
    return out


def _cgroup() -> Optional[str]:
    """A memory cgroup holding this process (and so its children), if we may make one."""
    name = f"pyg_dist_cachebench_{os.getpid()}"
    try:
        (CGROUP / name).mkdir()
        (CGROUP / name / "cgroup.procs").write_text(str(os.getpid()))
        return name
    except OSError:
        return None


def _leave(group: Optional[str]) -> None:
    if group is not None:
        (CGROUP / "cgroup.procs").write_text(str(os.getpid()))
        try:  # hand the page cache charged to it back to the parent
            (CGROUP / group / "memory.force_empty").write_text("0")
        except OSError:
            pass
        for _ in range(50):  # the group goes once its exited children are reaped
            try:
                (CGROUP / group).rmdir()
                return
            except OSError:
                time.sleep(0.2)
        print(f"  could not remove cgroup {group}", flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=1_000_000)
    p.add_argument("--avg-degree", type=float, default=50.0)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--power-law", type=float, default=2.5)
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/pyg_dist_bench"))
    p.add_argument("--trainers", type=int, default=2, help="trainers per partition")
    p.add_argument("--workers", type=int, default=1, help="sampler workers per trainer")
    p.add_argument("--cache", type=float, default=0.5, help="fraction of the halo cached")
    p.add_argument("--batches", type=int, default=4)
    args = p.parse_args(argv)
    root = folder(args, 2)
    group = _cgroup()
    print(f"shared cache benchmark: {root.name}, 2 partitions x {args.trainers} trainers x "
          f"(1 + {args.workers} workers), cache {args.cache:g} of the halo; cgroup "
          f"{'on' if group else 'off (not root?)'}", flush=True)
    try:
        _run(args, root, "none", group)  # warm: the partition's pages are resident after
        runs = {c: _run(args, root, c, group) for c in ("none", "private", "shared")}
    finally:
        _leave(group)
    none, private, shared = runs["none"], runs["private"], runs["shared"]
    cost = {k: {m: (None if r[m] is None or none[m] is None else round(r[m] - none[m], 1))
                for m in ("pss_mb", "cgroup_mb")} for k, r in (("private", private),
                                                                ("shared", shared))}
    result = {"benchmark": "shared_cache", "graph": root.name, "partitions": 2,
              "trainers_per_partition": args.trainers, "workers_per_trainer": args.workers,
              "cache_fraction": args.cache, "cache_mb_per_partition": shared["cache_mb"],
              "copies_private": private["processes"], "copies_shared": 2,
              "runs": runs, "cache_cost": cost,
              "saved_mb": {m: (None if cost["private"][m] is None else
                               round(cost["private"][m] - cost["shared"][m], 1))
                           for m in ("pss_mb", "cgroup_mb")}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
