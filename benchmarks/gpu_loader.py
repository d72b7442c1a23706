"""Batches onto a GPU: what pinning costs and buys, next to sampling alone and a step.

One process, one partition of a synthetic graph (default 200k nodes, average degree 20,
100 float32 features), fan-out 15,10,5, batch 1024. The same loader options run four
ways, interleaved round by round so a noisy machine affects each alike:

- ``cpu``: batches stay on the CPU (the sampling and gathering alone);
- ``cuda_pageable``: ``device="cuda", pin_memory=False`` (a synchronous copy from
  pageable memory);
- ``cuda_pinned``: ``device="cuda", pin_memory=True`` (the default on CUDA: the batch is
  copied into pinned memory, then sent with a non-blocking copy);
- ``cuda_train``: ``cuda_pinned`` plus a GraphSAGE training step on the GPU per batch.

Each pass ends with ``torch.cuda.synchronize()`` so every copy is counted. Besides the
loader, one batch's tensors are copied host-to-device three ways to give the link's
figures: from pageable memory, pin-then-copy, and from memory already pinned (GB/s).

Prints ONE JSON line (``{"benchmark": "gpu_loader", ...}``); needs a CUDA device.

Example:
    python benchmarks/gpu_loader.py --partition-dir /tmp/syn200k   # built on first use
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partition-dir", type=Path, default=Path("/tmp/pyg_dist_gpu_syn"))
    p.add_argument("--num-nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=float, default=20.0)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=20, help="per pass, after one warm-up")
    p.add_argument("--rounds", type=int, default=3)
    return p.parse_args(argv)


def ensure_graph(args: argparse.Namespace) -> Path:
    """The partition folder, generated (random assignment, one part) on first use."""
    if not (args.partition_dir / "META.json").exists():
        from pyg_dist.cli.partition import main as partition
        partition(["--dataset", "synthetic", "--num-nodes", str(args.num_nodes),
                   "--avg-degree", str(args.avg_degree), "--feat-dim", str(args.feat_dim),
                   "--num-classes", "10", "--num-parts", "1", "--method", "random",
                   "--out", str(args.partition_dir), "--quiet"])
    return args.partition_dir


def make_loader(stores, args, device: Optional[str], pin: bool):
    from pyg_dist import DistContext, DistNeighborLoader
    from pyg_dist.store._original_ids import PartIds
    from pyg_dist._typing import HOMO_NODE

    seeds = PartIds.of_stores(*stores).table("node", HOMO_NODE).long()
    return DistNeighborLoader(data=stores, num_neighbors=[int(f) for f in args.fanout.split(",")],
                              input_nodes=seeds, batch_size=args.batch_size, shuffle=True,
                              seed=0, current_ctx=DistContext.from_env(), device=device,
                              pin_memory=pin)


def run_pass(loader, batches: int, step=None) -> float:
    """Seeds per second over ``batches`` batches after one warm-up batch."""
    it = iter(loader)
    batch = next(it)
    if step is not None:
        step(batch)
    torch.cuda.synchronize()
    start, seeds = time.perf_counter(), 0
    for i, batch in enumerate(it):
        batch.x.sum()  # touches the rows where they are (the copy must have finished)
        if step is not None:
            step(batch)
        seeds += batch.batch_size
        if i + 1 == batches:
            break
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    it.close()
    return seeds / elapsed


def link_figures(batch) -> Dict[str, float]:
    """GB/s of one CPU batch's tensors to the GPU: pageable, pin-then-copy, pinned."""
    tensors = [v for v in batch.to_dict().values() if isinstance(v, torch.Tensor)]
    size = sum(t.numel() * t.element_size() for t in tensors)
    pinned = [t.pin_memory() for t in tensors]

    def timed(fn) -> float:
        best = float("inf")
        for _ in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        return size / best / 1e9

    return {"batch_mb": round(size / 1e6, 2),
            "h2d_pageable_gbps": round(timed(lambda: [t.to("cuda") for t in tensors]), 2),
            "h2d_pin_then_copy_gbps": round(timed(
                lambda: [t.pin_memory().to("cuda", non_blocking=True) for t in tensors]), 2),
            "h2d_pinned_gbps": round(timed(
                lambda: [t.to("cuda", non_blocking=True) for t in pinned]), 2)}


def trainer(num_features: int, num_layers: int):
    from torch_geometric.nn import GraphSAGE

    model = GraphSAGE(num_features, 256, num_layers=num_layers, out_channels=10).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step(batch) -> None:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size].long() % 10).backward()
        optimizer.step()
    return step


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_loader.py needs a CUDA device")
    from pyg_dist import LocalFeatureStore, LocalGraphStore, shutdown_rpc

    torch.set_num_threads(1)
    root = ensure_graph(args)
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    loaders = {"cpu": make_loader(stores, args, None, False),
               "cuda_pageable": make_loader(stores, args, "cuda", False),
               "cuda_pinned": make_loader(stores, args, "cuda", True)}
    step = trainer(args.feat_dim, len(args.fanout.split(",")))
    runs: Dict[str, List[float]] = {k: [] for k in [*loaders, "cuda_train"]}
    for _ in range(args.rounds):
        for name, loader in loaders.items():
            runs[name].append(run_pass(loader, args.batches))
        runs["cuda_train"].append(run_pass(loaders["cuda_pinned"], args.batches, step))
    links = link_figures(next(iter(loaders["cpu"])))
    stages = {}  # loader.stats(): the copy to the GPU is in "finish"
    for name, loader in loaders.items():
        st = loader.stats().stages
        stages.update({f"{name}_{k}_ms": round(st[k].median_ms, 2)
                       for k in ("produce", "finish", "wait")})
        loader.close()
    shutdown_rpc()
    med = {k: round(statistics.median(v), 1) for k, v in runs.items()}
    print(json.dumps({"benchmark": "gpu_loader", "gpu": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "num_nodes": args.num_nodes,
                      "avg_degree": args.avg_degree, "feat_dim": args.feat_dim,
                      "fanout": args.fanout, "batch_size": args.batch_size,
                      **{f"{k}_seeds_per_s": v for k, v in med.items()},
                      "pinned_over_pageable": round(med["cuda_pinned"] / med["cuda_pageable"], 3),
                      "cuda_pinned_over_cpu": round(med["cuda_pinned"] / med["cpu"], 3),
                      **links, **stages, "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
