"""Starting sampler workers: forked from one fork server per trainer, or spawned.

One trainer (a fresh interpreter, as a user's script is) on one partition of a synthetic
community graph (``benchmarks/sampling.py`` builds and caches it) opens a loader with
``--workers`` sampler workers and times its first batch (the workers' start included),
then, with the workers alive, reads their CPU time and memory; then a second loader does
the same (what a validation loader, or the next epoch's fresh loader, costs). Both ways
of starting workers (``PYG_DIST_WORKER_START``) run, one after the other:

- ``first_batch_s``/``second_loader_first_batch_s``: seconds to the first batch;
- ``worker_cpu_s``: CPU seconds of the workers (and of the fork server, which is counted
  once, with the first loader), summed, while the first batch was made;
- ``worker_pss_mb``: the workers' (and server's) PSS summed (``/proc/<pid>/smaps_rollup``):
  what they add to the machine's memory.

Human-readable lines first, then ONE JSON line.

Example:
    python benchmarks/worker_start.py               # ~2 minutes
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling import partitioned  # noqa: E402  (the sampling benchmark's graphs, cached)

METHODS = ("spawn", "forkserver")


def _stat(pid: int) -> List[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu_s(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _workers_and_server(loader) -> List[int]:
    """The loader's workers, and their fork server (their parent, if not this process)."""
    pids = [proc.pid for proc in loader._pool.procs]
    parents = {int(_stat(pid)[1]) for pid in pids} - {os.getpid()}
    return pids + sorted(parents)


def _one_loader(data, ctx, workers: int, counted: set) -> Dict[str, float]:
    from pyg_dist import DistNeighborLoader, node_split
    from pyg_dist.memory import process_memory

    loader = DistNeighborLoader(data=data, num_neighbors=[10, 5], batch_size=256,
                                input_nodes=node_split(data, "train", ctx), shuffle=True,
                                num_workers=workers, current_ctx=ctx, seed=0)
    start = time.perf_counter()
    next(iter(loader))
    took = time.perf_counter() - start
    pids = [p for p in _workers_and_server(loader) if p not in counted]
    counted.update(pids)
    out = {"first_batch_s": round(took, 2),
           "worker_cpu_s": round(sum(_cpu_s(p) for p in pids), 2),
           "worker_pss_mb": round(sum(process_memory(str(p))["pss_mb"] or 0 for p in pids))}
    loader.close()
    return out


def _job(root: str, workers: int) -> Dict[str, object]:
    from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, shutdown_rpc

    ctx = DistContext.from_env()
    data = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    counted: set = set()
    try:
        first = _one_loader(data, ctx, workers, counted)
        second = _one_loader(data, ctx, workers, counted)
    finally:
        shutdown_rpc()
    return {**first, "second_loader_first_batch_s": second["first_batch_s"],
            "second_loader_worker_cpu_s": second["worker_cpu_s"]}


def main(argv: Optional[List[str]] = None) -> None:
    from pyg_dist.testing import run_ranks

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2, help="sampler workers per loader")
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/pyg_dist_bench"))
    args = p.parse_args(argv)
    root = partitioned(args.cache_dir, "community", args.num_nodes, 20.0, 100, 1, 0)
    res: Dict[str, object] = {"benchmark": "worker_start", "workers": args.workers,
                              "num_nodes": args.num_nodes}
    for method in METHODS:
        out = run_ranks(_job, 1, str(root), args.workers, timeout=600, start_method="spawn",
                        extra_env={"PYG_DIST_WORKER_START": method, "OMP_NUM_THREADS": "1"})[0]
        print(f"{method}: {out}", flush=True)
        res[method] = out
    print(json.dumps(res))


if __name__ == "__main__":
    main()
