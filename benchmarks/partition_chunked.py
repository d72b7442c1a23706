"""Benchmark: out-of-core partitioning of a chunked graph inside a memory cgroup.

A community graph is generated straight into the chunked layout (DGL's chunked graph
format, ``.npy`` chunks), chunk by chunk, never whole in memory: node ``v`` sits at
position ``(a * v + b) mod N`` of a hidden ordering whose consecutive blocks are the
communities; each edge joins a uniform source to a node of its community with
probability ``--p-in``, else to a uniform node. Nodes carry ``x`` (float32
``--feat-dim``), ``y`` and ``train_mask`` (10%).

The graph is then partitioned into ``--num-parts`` parts twice, each run in a fresh
process inside its own cgroup v1 ``memory`` group (``/sys/fs/cgroup/memory``, root):

- ``ooc``: ``OutOfCorePartitioner`` with ``--memory-budget``, under the group limit
  ``--limit`` (killed if it goes over);
- ``dist``: ``--ranks`` ranks of ``DistPartitioner`` (multi-machine partitioning, here
  on one machine): fresh processes with torchrun's environment, each in its own group
  limited to ``--rank-limit``, with ``--rank-budget`` each (``--ranks 0`` leaves it out);
- ``in_memory``: ``read_chunked`` + the in-memory ``Partitioner`` (no limit), for
  comparison (``--skip-in-memory`` leaves it out).

Reported per run: ``wall_s``, ``phases_s``, ``peak_rss_gb`` (the process's
``ru_maxrss``, file-backed pages of memory maps included), ``peak_anon_gb`` (its own
anonymous memory, sampled every 0.25 s from ``smaps_rollup`` by a Python thread: it
misses peaks inside calls that hold the GIL, such as pymetis's), ``cgroup_peak_gb``
(``memory.max_usage_in_bytes``: anonymous memory plus page cache charged to the
group), ``cut_pct`` (cut edges / edges) and ``balance`` (largest partition / mean, by
owned nodes and by edges). GB means GiB. Human-readable lines first, then one JSON line.

Example:
    python benchmarks/partition_chunked.py --num-nodes 1000000 --num-edges 20000000 \\
        --memory-budget 512MB --limit 1.5GB
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
GIB = 2**30


# ---- generating the chunked graph ------------------------------------------------------
def _affine(num_nodes: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    while True:
        a = int(rng.integers(1, num_nodes))
        if math.gcd(a, num_nodes) == 1:
            return a, int(rng.integers(0, num_nodes)), pow(a, -1, num_nodes)


def generate(folder: Path, num_nodes: int, num_edges: int, feat_dim: int, num_classes: int,
             community: int, p_in: float, chunk_size: int, seed: int) -> None:
    """Writes the graph chunk by chunk (memory: one chunk) into ``folder``."""
    a, b, a_inv = _affine(num_nodes, seed)
    rng = np.random.default_rng(seed + 1)
    for sub in ("edges", "node_data"):
        (folder / sub).mkdir(parents=True)
    edge_files, edge_counts = [], []
    for i, lo in enumerate(range(0, num_edges, chunk_size)):
        k = min(chunk_size, num_edges - lo)
        src = rng.integers(0, num_nodes, k)
        start = (src * a + b) % num_nodes // community * community
        pos = np.minimum(start + rng.integers(0, community, k), num_nodes - 1)
        dst = np.where(rng.random(k) < p_in, (pos - b) % num_nodes * a_inv % num_nodes,
                       rng.integers(0, num_nodes, k))
        np.save(folder / "edges" / f"part-{i}.npy", np.stack([src, dst], axis=1))
        edge_files.append(f"edges/part-{i}.npy")
        edge_counts.append(k)
    data: Dict[str, List[str]] = {"x": [], "y": [], "train_mask": []}
    node_counts = []
    for i, lo in enumerate(range(0, num_nodes, chunk_size)):
        v = np.arange(lo, min(lo + chunk_size, num_nodes))
        label = ((v * a + b) % num_nodes // community % num_classes).astype(np.int64)
        x = rng.standard_normal((v.size, feat_dim), dtype=np.float32)
        x[:, 0] += label
        for name, value in (("x", x), ("y", label), ("train_mask", rng.random(v.size) < 0.1)):
            np.save(folder / "node_data" / f"{name}-{i}.npy", value)
            data[name].append(f"node_data/{name}-{i}.npy")
        node_counts.append(int(v.size))
    meta = {"graph_name": "community", "node_type": ["_N"], "num_nodes_per_chunk": [node_counts],
            "edge_type": ["_N:_E:_N"], "num_edges_per_chunk": [edge_counts],
            "edges": {"_N:_E:_N": {"format": {"name": "numpy"}, "data": edge_files}},
            "node_data": {"_N": {k: {"format": {"name": "numpy"}, "data": v}
                                 for k, v in data.items()}}}
    (folder / "metadata.json").write_text(json.dumps(meta))


# ---- one partitioning run in a child process ---------------------------------------------
class AnonPeak:
    """Samples this process's anonymous memory (``smaps_rollup``) every ``interval`` s."""

    def __init__(self, interval: float = 0.25) -> None:
        import threading

        from pyg_dist.memory import process_memory

        self.peak_mb, self._stop = 0.0, threading.Event()

        def loop() -> None:
            while not self._stop.wait(interval):
                self.peak_mb = max(self.peak_mb, process_memory()["anon_mb"] or 0.0)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def child(mode: str, input: Path, out: Path, num_parts: int, budget: str) -> None:
    """Partitions and prints one JSON line (run in its own process and cgroup)."""
    start, anon = time.perf_counter(), AnonPeak()
    extra: Dict[str, Any] = {}
    if mode == "ooc":
        from pyg_dist.partition._outofcore import OutOfCorePartitioner

        part = OutOfCorePartitioner(input, num_parts, out, budget, progress=False)
        meta = part.generate()
    elif mode == "dist":  # one rank of several (torchrun's environment, set by the parent)
        from datetime import timedelta

        from pyg_dist.partition._distributed import ArrayComm, DistPartitioner
        from pyg_dist.rpc import init_process_group

        ctx = init_process_group("gloo", timeout=timedelta(hours=2))
        part = DistPartitioner(input, num_parts, out, budget,
                               comm=ArrayComm(ctx.rank, ctx.world_size), progress=False)
        meta = part.generate()
        extra["rank"] = ctx.rank
    else:
        from pyg_dist.chunked import read_chunked
        from pyg_dist.partition import Partitioner

        data = read_chunked(input)
        load_s = time.perf_counter() - start
        part = Partitioner(data, num_parts, out, progress=False)
        meta = part.generate()
        part.timings.phases_s["load"] = load_s
    edges = [sum(p.edges.values()) for p in meta.parts]
    owned = [sum(p.owned_nodes.values()) for p in meta.parts]
    cut = sum(sum(p.cut_edges.values()) for p in meta.parts)
    print(json.dumps({
        "wall_s": round(time.perf_counter() - start, 1),
        "phases_s": {k: round(v, 1) for k, v in part.timings.phases_s.items()},
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "peak_anon_gb": round(anon.stop() / 1024, 2),
        "cut_pct": round(100.0 * cut / max(sum(edges), 1), 2),
        "balance_nodes": round(max(owned) / (sum(owned) / len(owned)), 3),
        "balance_edges": round(max(edges) / (sum(edges) / len(edges)), 3), **extra}))


def _group(name: str, limit: Optional[int]) -> Optional[Path]:
    if os.geteuid() != 0 or not os.access(CGROUP_ROOT, os.W_OK):
        return None
    group = CGROUP_ROOT / name
    group.mkdir(exist_ok=True)
    if limit is not None:
        (group / "memory.limit_in_bytes").write_text(str(limit))
    return group


def _remove(group: Path) -> None:
    for _ in range(50):
        try:
            (group / "memory.force_empty").write_text("0")
        except OSError:
            pass
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.2)
    print(f"could not remove cgroup {group}", file=sys.stderr)


def run(mode: str, input: Path, out: Path, args: argparse.Namespace,
        limit: Optional[int]) -> Dict[str, Any]:
    """One child run inside a fresh memory cgroup; its JSON plus the group's peak."""
    group = _group(f"pyg_dist_bench_{os.getpid()}_{mode}", limit)
    argv = [sys.executable, __file__, "--child", mode, "--input", str(input), "--out", str(out),
            "--num-parts", str(args.num_parts), "--memory-budget", args.memory_budget]
    enter = (lambda: (group / "cgroup.procs").write_text(str(os.getpid()))) if group else None
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, preexec_fn=enter, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        res: Dict[str, Any] = json.loads(lines[-1]) if lines else {
            "error": "killed (over the memory limit)" if proc.returncode == -9 else
            (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]}
        if group is not None:
            res["cgroup_peak_gb"] = round(
                int((group / "memory.max_usage_in_bytes").read_text()) / GIB, 2)
            res["cgroup_limit_gb"] = None if limit is None else round(limit / GIB, 2)
    finally:
        if group is not None:
            _remove(group)
        shutil.rmtree(out, ignore_errors=True)
    return res


def run_dist(input: Path, out: Path, args: argparse.Namespace, limit: Optional[int]
             ) -> Dict[str, Any]:
    """``--ranks`` ranks of :class:`DistPartitioner`, each a fresh process with
    torchrun's environment in its own memory cgroup (limit ``--rank-limit``); the
    rendezvous store is this process's. Per-rank JSON plus each group's peak."""
    from datetime import timedelta

    import torch.distributed as dist

    from pyg_dist.testing import free_port

    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                          timeout=timedelta(hours=2), wait_for_workers=False)
    groups, procs = [], []
    try:
        for rank in range(args.ranks):
            group = _group(f"pyg_dist_bench_{os.getpid()}_rank{rank}", limit)
            groups.append(group)
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(args.ranks),
                   "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank),
                   "TORCHELASTIC_USE_AGENT_STORE": "True"}
            argv = [sys.executable, __file__, "--child", "dist", "--input", str(input),
                    "--out", str(out), "--num-parts", str(args.num_parts), "--memory-budget",
                    args.rank_budget]
            enter = (lambda g=group: (g / "cgroup.procs").write_text(str(os.getpid()))) \
                if group else None
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, preexec_fn=enter, env=env))
        ranks = []
        for rank, (proc, group) in enumerate(zip(procs, groups)):
            stdout, stderr = proc.communicate()
            lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
            res: Dict[str, Any] = json.loads(lines[-1]) if lines else {
                "rank": rank, "error": "killed (over the memory limit)" if proc.returncode == -9
                else (stderr.strip().splitlines() or ["failed"])[-1][:300]}
            if group is not None:
                res["cgroup_peak_gb"] = round(
                    int((group / "memory.max_usage_in_bytes").read_text()) / GIB, 2)
                res["cgroup_limit_gb"] = None if limit is None else round(limit / GIB, 2)
            ranks.append(res)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for group in groups:
            if group is not None:
                _remove(group)
        shutil.rmtree(out, ignore_errors=True)
        del store
    first = ranks[0]
    keep = ("wall_s", "cut_pct", "balance_nodes", "balance_edges", "phases_s")
    return {**{k: first[k] for k in keep if k in first},
            "ranks": [{k: r.get(k) for k in ("rank", "wall_s", "peak_rss_gb", "peak_anon_gb",
                                               "cgroup_peak_gb", "cgroup_limit_gb", "error")
                       if k in r} for r in ranks]}


def main() -> None:
    from pyg_dist.partition._outofcore.budget import parse_size

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-nodes", type=int, default=20_000_000)
    p.add_argument("--num-edges", type=int, default=400_000_000)
    p.add_argument("--feat-dim", type=int, default=64)
    p.add_argument("--num-classes", type=int, default=16)
    p.add_argument("--community", type=int, default=1000, help="nodes per community")
    p.add_argument("--p-in", type=float, default=0.8)
    p.add_argument("--chunk-size", type=int, default=4_000_000)
    p.add_argument("--num-parts", type=int, default=4)
    p.add_argument("--memory-budget", default="2GB")
    p.add_argument("--limit", default="4GB", help="cgroup limit of the out-of-core run")
    p.add_argument("--skip-in-memory", action="store_true")
    p.add_argument("--skip-ooc", action="store_true", help="leave the one-process run out")
    p.add_argument("--ranks", type=int, default=2,
                   help="ranks of the multi-machine run (0: leave it out)")
    p.add_argument("--rank-budget", default="1GB", help="--memory-budget of each rank")
    p.add_argument("--rank-limit", default="2.5GB", help="cgroup limit of each rank")
    p.add_argument("--workdir", default=None, help="where the graph goes (default: a temp dir)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", choices=["ooc", "mem", "dist"], help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, Path(args.input), Path(args.out), args.num_parts,
                     args.memory_budget)
    work = Path(tempfile.mkdtemp(prefix="pyg_dist_chunked_", dir=args.workdir))
    try:
        start = time.perf_counter()
        generate(work / "graph", args.num_nodes, args.num_edges, args.feat_dim,
                 args.num_classes, args.community, args.p_in, args.chunk_size, args.seed)
        disk = sum(f.stat().st_size for f in (work / "graph").rglob("*") if f.is_file())
        print(f"generated {args.num_nodes} nodes, {args.num_edges} edges ({disk / GIB:.2f} GB "
              f"on disk) in {time.perf_counter() - start:.0f}s", flush=True)
        res: Dict[str, Any] = {"num_nodes": args.num_nodes, "num_edges": args.num_edges,
                               "feat_dim": args.feat_dim, "num_parts": args.num_parts,
                               "memory_budget": args.memory_budget,
                               "input_gb": round(disk / GIB, 2)}
        if not args.skip_ooc:
            res["ooc"] = run("ooc", work / "graph", work / "out", args, parse_size(args.limit))
            print(f"out of core: {res['ooc']}", flush=True)
        if args.ranks > 0:
            res["rank_budget"] = args.rank_budget
            res["dist"] = run_dist(work / "graph", work / "out", args,
                                   parse_size(args.rank_limit))
            print(f"{args.ranks} ranks:     {res['dist']}", flush=True)
        if not args.skip_in_memory:
            res["in_memory"] = run("mem", work / "graph", work / "out", args, None)
            print(f"in memory:   {res['in_memory']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
