"""Memory benchmark: one copy of a partition per machine.

On a products-scale synthetic graph (default 2.4M nodes, 124M directed edges, 100
float32 features; :func:`pyg_dist.datasets._synthetic.community_graph`) in 1 partition
and in 2 (coarsened METIS), side by side in one run:

- ``open``: seconds to open the 1-partition stores, private load (``mmap=False``)
  against mapped (``mmap=True``), page cache warm, and the partition's size on disk;
- ``memory``: sum over 1, 2 and 4 trainer processes on the one partition of their
  PSS and RSS (``/proc/<pid>/smaps_rollup``) once each has sampled batches with
  features and touched its whole partition (the steady state of a long run), for
  private and mapped stores; ``ratio_4_vs_1`` is the 4-process PSS sum over the
  1-process one;
- ``direct``: seeds/s per process of 2 processes on 2 partitions (fan-out 15,10,5,
  batch 1024, features fetched), other partition read directly from its mapped files
  against over RPC (``PYG_DIST_DIRECT_READS=0``), each over the per-process seeds/s of
  1 process on 1 partition, and over that of 2 processes on 1 partition (what this
  machine gives two busy processes at all: ``machine_scaling``);
- ``cgroup``: training (GraphSAGE, 2 layers, fan-out 10,5) on a 1-partition folder of
  the same graph with wider features (``--cgroup-feat-dim``, default 320: 3 GB)
  inside a cgroup v1 ``memory`` group whose limit is the feature file's size / 1.5,
  with the partition's pages evicted from the page cache first: mapped (with the
  default random-access ``madvise`` hint, and without it), and private: seeds/s, batches
  trained, major page faults, the group's peak usage and its limit hits; and the same
  mapped run without a limit for reference. Each run trains for ``--train-seconds`` and
  is stopped at three times that (its last per-batch line is reported). Needs root and a writable
  ``/sys/fs/cgroup/memory``; skipped (said in the JSON) elsewhere.

Targets: 4 trainers on one partition use <= 1.3x the memory (PSS) of one; opening a
3 GB partition < 0.5 s; 2 partitions on one machine with direct reads reach >= 0.9x
the per-process throughput of one partition; training runs with features 1.5x over
the memory limit. Graphs are cached under ``--cache-dir``. Human-readable lines
first, then ONE JSON line.

Example:
    python benchmarks/memory.py                      # full scale (~15 minutes)
    python benchmarks/memory.py --num-nodes 200000   # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling import BenchConfig, _rates, sampling_job  # noqa: E402

ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
SETTINGS = ("open", "memory", "direct", "cgroup")


# ---- partition folders (cached) ------------------------------------------------------
def _build(root: str, num_nodes: int, avg_degree: float, feat_dim: int, parts: int) -> None:
    from pyg_dist import Partitioner
    from pyg_dist.datasets import community_graph

    data = community_graph(num_nodes, avg_degree, feat_dim, seed=0)
    Partitioner(data, parts, root, method="metis" if parts > 1 else "random",
                coarsen=True if parts > 1 else None, overwrite=True, progress=False).generate()


def folder(args: argparse.Namespace, parts: int, feat_dim: Optional[int] = None) -> Path:
    from pyg_dist.testing import run_ranks

    feat_dim = feat_dim or args.feat_dim
    root = args.cache_dir / f"memory_n{args.num_nodes}_d{args.avg_degree:g}_f{feat_dim}_p{parts}"
    if not (root / "META.json").exists():
        start = time.perf_counter()
        run_ranks(_build, 1, str(root), args.num_nodes, args.avg_degree, feat_dim, parts,
                  timeout=3600,
                  start_method="spawn")  # in a child: the graph's memory is returned afterwards
        print(f"  built {root.name} in {time.perf_counter() - start:.0f}s", flush=True)
    return root


def _part_bytes(root: Path, part: int = 0) -> int:
    return sum(f.stat().st_size for f in (root / f"part_{part}").iterdir())


# ---- jobs run in child processes -------------------------------------------------------
def open_job(root: str, mmap: bool) -> float:
    from pyg_dist import LocalFeatureStore, LocalGraphStore

    start = time.perf_counter()
    LocalFeatureStore.from_partition(root, 0, mmap=mmap)
    LocalGraphStore.from_partition(root, 0, mmap=mmap)
    return time.perf_counter() - start


def trainer_job(root: str, mmap: bool, batches: int) -> Dict[str, Any]:
    """Samples batches with features, touches the whole partition, then reports its
    memory while every rank still holds its stores (barriers around the reading)."""
    import torch.distributed as dist

    from pyg_dist import (DistContext, DistNeighborSampler, LocalFeatureStore,
                          LocalGraphStore, shutdown_rpc)
    from pyg_dist.memory import process_memory

    torch.set_num_threads(1)
    ctx = DistContext.from_env(rpc_timeout=300)
    data = (LocalFeatureStore.from_partition(root, 0, mmap=mmap),
            LocalGraphStore.from_partition(root, 0, mmap=mmap))
    try:
        sampler = DistNeighborSampler(data, num_neighbors=[15, 10, 5], current_ctx=ctx,
                                      seed=ctx.rank)
        owned = data[1].owned_nodes()
        g = torch.Generator().manual_seed(ctx.rank)
        start = time.perf_counter()
        for _ in range(batches):
            seeds = owned[torch.randint(0, owned.numel(), (1024,), generator=g)]
            sub = sampler.group.loop.run(sampler.sample_subgraph({sampler.meta.node_types[0]: seeds}))
            sampler.group.loop.run(sampler.fetcher.fetch(sub.node, sub.edge, unique=False))
        seconds = time.perf_counter() - start
        touched = sum(float(t.float().sum()) for t in [data[0].get_tensor(None, "x")]
                      + [c.indices for c in data[1].csc_by_type.values()])
        if ctx.is_distributed:
            dist.barrier()
        mem = process_memory()
        if ctx.is_distributed:
            dist.barrier()
        return {"seeds_per_s": batches * 1024 / seconds, "touched": touched, **mem}
    finally:
        shutdown_rpc()


# ---- settings ------------------------------------------------------------------------
def run_open(root: Path) -> Dict[str, Any]:
    from pyg_dist.testing import run_ranks

    out: Dict[str, Any] = {"partition_gb": round(_part_bytes(root) / 1e9, 3)}
    for mmap in (False, True):  # private first: it also warms the page cache
        times = [run_ranks(open_job, 1, str(root), mmap, timeout=600,
                           start_method="spawn")[0] for _ in range(2)]
        out["mapped_s" if mmap else "private_s"] = round(min(times), 4)
    out["speedup"] = round(out["private_s"] / out["mapped_s"], 1)
    print(f"open {out['partition_gb']} GB partition: private {out['private_s']:.3f}s, "
          f"mapped {out['mapped_s']:.4f}s", flush=True)
    return out


def run_memory(root: Path, batches: int) -> Dict[str, Any]:
    from pyg_dist.testing import run_ranks

    out: Dict[str, Any] = {}
    for mmap in (True, False):
        name = "mapped" if mmap else "private"
        per = {}
        for k in (1, 2, 4):
            res = run_ranks(trainer_job, k, str(root), mmap, batches, timeout=1800,
                            extra_env=ONE_THREAD, start_method="spawn")
            per[k] = {"pss_gb_sum": round(sum(r["pss_mb"] for r in res) / 1024, 3),
                      "rss_gb_sum": round(sum(r["rss_mb"] for r in res) / 1024, 3),
                      "anon_gb_sum": round(sum(r["anon_mb"] for r in res) / 1024, 3),
                      "seeds_per_s_per_process": round(sum(r["seeds_per_s"] for r in res) / k)}
            print(f"memory {name}, {k} trainer(s) on 1 partition: PSS sum "
                  f"{per[k]['pss_gb_sum']:.2f} GiB (own memory {per[k]['anon_gb_sum']:.2f}), "
                  f"RSS sum {per[k]['rss_gb_sum']:.2f} GiB", flush=True)
        out[name] = {str(k): v for k, v in per.items()}
        out[name]["ratio_4_vs_1"] = round(per[4]["pss_gb_sum"] / per[1]["pss_gb_sum"], 3)
    return out


def run_direct(root1: Path, root2: Path, batches: int) -> Dict[str, Any]:
    from pyg_dist.testing import run_ranks

    cfg = BenchConfig(fanout=[15, 10, 5], batch_size=1024, batches=batches, warmup=3,
                      fetch_ids=0, fetch_repeats=0, seed=0, timeout=600)

    def per_process(root: Path, world: int, direct: str) -> float:
        outs = run_ranks(sampling_job, world, str(root), cfg, True, False, timeout=1800,
                         extra_env={**ONE_THREAD, "PYG_DIST_DIRECT_READS": direct},
                         start_method="spawn")
        return _rates(outs)["per_process_seeds_per_s"]

    one = per_process(root1, 1, "1")
    machine = per_process(root1, 2, "1")  # how this machine scales to 2 busy processes
    out = {"one_partition_seeds_per_s": round(one),
           "two_processes_one_partition_seeds_per_s_per_process": round(machine),
           "machine_scaling": round(machine / one, 3)}
    for direct, name in (("1", "direct"), ("0", "rpc")):
        rate = per_process(root2, 2, direct)
        out[f"{name}_seeds_per_s_per_process"] = round(rate)
        out[f"{name}_vs_one_partition"] = round(rate / one, 3)
        out[f"{name}_vs_two_processes_one_partition"] = round(rate / machine, 3)
        print(f"2 partitions, 2 processes, {name}: {rate:.0f} seeds/s per process "
              f"({rate / one:.2f}x one partition's {one:.0f})", flush=True)
    return out


def _evict(root: Path) -> None:
    """Drops the partition's clean pages from the page cache (so a memory group is
    charged for what its process reads, instead of finding it cached)."""
    for path in (root / "part_0").iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def train_child(root: str, mmap: bool, seconds: float) -> None:
    """Trains GraphSAGE on the standalone partition for ``seconds``; prints JSON."""
    import resource

    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    from pyg_dist import DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore

    torch.set_num_threads(1)
    data = (LocalFeatureStore.from_partition(root, 0, mmap=mmap),
            LocalGraphStore.from_partition(root, 0, mmap=mmap))
    ctx = DistContext()
    loader = DistNeighborLoader(data, num_neighbors=[10, 5], current_ctx=ctx,
                                input_nodes=data[1].owned_nodes(), batch_size=512,
                                shuffle=True)
    x = data[0].get_tensor(None, "x")
    classes = int(data[0].get_tensor(None, "y").max()) + 1
    model = GraphSAGE(x.size(1), 64, num_layers=2, out_channels=classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    from pyg_dist.memory import process_memory

    seeds, batches, start = 0, 0, time.perf_counter()
    for batch in loader:  # a line per batch: a run stopped at its time limit still reports
        opt.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        opt.step()
        seeds, batches = seeds + batch.batch_size, batches + 1
        usage = resource.getrusage(resource.RUSAGE_SELF)
        elapsed = time.perf_counter() - start
        print(json.dumps({"batches": batches, "seconds": elapsed, "seeds_per_s": seeds / elapsed,
                          "major_faults": usage.ru_majflt,
                          "own_mb": process_memory()["anon_mb"]}), flush=True)
        if elapsed > seconds:
            break


def _in_group(group: Optional[Path]):
    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
    return enter


def _train(root: Path, mmap: bool, seconds: float, group: Optional[Path],
           advice: str = "random") -> Dict[str, Any]:
    """Trains in a fresh process (in ``group``) for ``seconds``, stopped after
    ``3 * seconds + 60``; reports its last per-batch line."""
    _evict(root)
    argv = [sys.executable, __file__, "--train-child", str(root), "--seconds", str(seconds)]
    env = {**os.environ, **ONE_THREAD, "PYG_DIST_MMAP_ADVICE": advice}
    try:
        proc = subprocess.run(argv + ([] if mmap else ["--no-mmap"]), capture_output=True,
                              text=True, preexec_fn=_in_group(group), env=env,
                              timeout=3 * seconds + 60)
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, stderr, code = exc.stdout or "", exc.stderr or "", "stopped at the time limit"
        stdout, stderr = (v.decode() if isinstance(v, bytes) else v for v in (stdout, stderr))
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    out: Dict[str, Any] = {"trained": bool(lines), "returncode": code}
    if lines:
        out.update({k: round(v, 1) for k, v in json.loads(lines[-1]).items()})
    if not lines and isinstance(code, str):
        out["error"] = "no batch finished before the time limit"
    elif not lines and code != 0:
        out["error"] = ("killed (out of memory)" if code == -9 else
                        (stderr.strip().splitlines() or ["failed"])[-1][:200])
    return out


def run_cgroup(root: Path, seconds: float) -> Dict[str, Any]:
    feature_bytes = (root / "part_0" / "node_feats.pt").stat().st_size
    limit = int(feature_bytes / 1.5)
    if os.geteuid() != 0 or not os.access(CGROUP_ROOT, os.W_OK):
        return {"skipped": "needs root and a writable /sys/fs/cgroup/memory"}
    out: Dict[str, Any] = {"feature_file_gb": round(feature_bytes / 1e9, 3),
                           "limit_gb": round(limit / 1e9, 3),
                           "unlimited_mapped": _train(root, True, seconds, None)}
    for name, mmap, advice in (("mapped", True, "random"), ("mapped_no_advice", True, "none"),
                               ("private", False, "random")):
        group = CGROUP_ROOT / f"pyg_dist_bench_{os.getpid()}_{name}"
        group.mkdir()
        try:
            (group / "memory.limit_in_bytes").write_text(str(limit))
            res = _train(root, mmap, seconds, group, advice)
            res["peak_usage_gb"] = round(int((group / "memory.max_usage_in_bytes").read_text())
                                         / 1e9, 3)
            res["limit_hits"] = int((group / "memory.failcnt").read_text())
        finally:
            for _ in range(50):  # the group goes once its process has left
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
        out[name] = res
        print(f"cgroup limit {limit / 1e9:.2f} GB, features {feature_bytes / 1e9:.2f} GB, "
              f"{name}: {res}", flush=True)
    base = out["unlimited_mapped"].get("seeds_per_s")
    if base and out["mapped"].get("seeds_per_s"):
        out["mapped_vs_unlimited"] = round(out["mapped"]["seeds_per_s"] / base, 3)
    return out


def targets(res: Dict[str, Any]) -> Dict[str, Any]:
    cg = res.get("cgroup", {})
    return {"pss_4_vs_1_le_1.3": res["memory"]["mapped"]["ratio_4_vs_1"] <= 1.3,
            "open_lt_0.5s": res["open"]["mapped_s"] < 0.5,
            "direct_ge_0.9": res["direct"]["direct_vs_one_partition"] >= 0.9,
            "trains_over_limit": cg.get("mapped", {}).get("trained") if "mapped" in cg else None}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=2_400_000)
    p.add_argument("--avg-degree", type=float, default=2 * 62_000_000 / 2_400_000)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--batches", type=int, default=20, help="batches per process and setting")
    p.add_argument("--train-seconds", type=float, default=60.0, help="per cgroup run")
    p.add_argument("--cache-dir", type=Path,
                   default=Path(os.environ.get("TMPDIR", "/tmp")) / "pyg_dist_bench")
    p.add_argument("--skip-cgroup", action="store_true")
    p.add_argument("--only", default=",".join(SETTINGS),
                   help=f"comma-separated settings to run (default: all of {SETTINGS})")
    p.add_argument("--cgroup-feat-dim", type=int, default=320,
                   help="feature width of the graph trained under the memory limit (the "
                        "limit is its feature file / 1.5, so it must leave room for the "
                        "process itself: 320 gives 3 GB of features, a 2 GB limit)")
    p.add_argument("--train-child", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    p.add_argument("--no-mmap", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    if args.train_child:
        train_child(args.train_child, not args.no_mmap, args.seconds)
        return
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    root1, root2 = folder(args, 1), folder(args, 2)
    res: Dict[str, Any] = {"bench": "memory", "nodes": args.num_nodes,
                           "edges": round(args.num_nodes * args.avg_degree),
                           "feat_dim": args.feat_dim}
    only = set(args.only.split(","))
    if "open" in only:
        res["open"] = run_open(root1)
    if "memory" in only:
        res["memory"] = run_memory(root1, args.batches)
    if "direct" in only:
        res["direct"] = run_direct(root1, root2, args.batches)
    if "cgroup" in only:
        res["cgroup"] = ({"skipped": "--skip-cgroup"} if args.skip_cgroup else
                         run_cgroup(folder(args, 1, args.cgroup_feat_dim), args.train_seconds))
    if only >= set(SETTINGS):
        res["targets"] = targets(res)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
