"""Benchmark: DistEmbedding lookups and SparseAdam steps on 2 ranks.

A ``--num-embeddings`` x ``--dim`` float32 table (default 1,000,000 x 128) is split
evenly over ``--world-size`` processes (default 2, started like ``torchrun`` by
:func:`pyg_dist.testing.run_ranks`, one thread each). Every rank draws batches of
``--batch-size`` ids (default 4096), ``--remote-fraction`` of them (default half)
owned by other ranks, and measures:

- ``lookups``: ``emb(ids)`` under ``torch.no_grad()`` (local gather + one RPC per
  remote owner);
- ``steps``: lookup + backward + ``SparseAdam.step()`` (gradients routed to the
  owners by an all-to-all, update at the owner, closing barrier), all ranks in step.

The reference is one process, one thread: ``torch.nn.Embedding(sparse=True)`` with
``torch.optim.SparseAdam`` on the same table size and batch size. Ratios are
per-process batches/s of the distributed run over the reference (> 1: faster).
Human-readable lines first, then ONE JSON line.

Example:
    python benchmarks/embedding.py                         # full size
    python benchmarks/embedding.py --num-embeddings 100000 --iters 20
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List

import torch


@dataclass
class BenchConfig:
    """What to run (see ``--help``)."""
    num_embeddings: int
    dim: int
    batch_size: int
    world_size: int
    remote_fraction: float
    iters: int
    warmup: int
    lr: float
    seed: int
    timeout: float


def _rate(fn: Callable[[int], None], iters: int, warmup: int) -> float:
    """Calls ``fn(i)`` ``warmup`` times, then returns calls per second over ``iters``."""
    for i in range(warmup):
        fn(i)
    start = time.perf_counter()
    for i in range(iters):
        fn(warmup + i)
    return iters / (time.perf_counter() - start)


def _batches(cfg: BenchConfig, lo: int, hi: int, count: int) -> List[torch.Tensor]:
    """Batches of ids: ``remote_fraction`` outside ``[lo, hi)``, the rest inside."""
    gen = torch.Generator().manual_seed(cfg.seed + lo)
    n_remote = int(cfg.batch_size * cfg.remote_fraction) if hi - lo < cfg.num_embeddings else 0
    out = []
    for _ in range(count):
        local = torch.randint(lo, hi, (cfg.batch_size - n_remote,), generator=gen)
        remote = torch.randint(0, cfg.num_embeddings - (hi - lo), (n_remote,), generator=gen)
        remote = remote + (remote >= lo).long() * (hi - lo)  # skip over the own range
        out.append(torch.cat([local, remote])[torch.randperm(cfg.batch_size, generator=gen)])
    return out


def _init(shape, dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype).uniform_(-0.1, 0.1)


def _worker(cfg: BenchConfig) -> Dict[str, float]:
    from pyg_dist.embedding import DistEmbedding, SparseAdam
    from pyg_dist import DistContext, init_rpc, shutdown_rpc

    torch.set_num_threads(1)
    ctx = DistContext.from_env(rpc_timeout=cfg.timeout)
    init_rpc(ctx, num_parts=ctx.world_size)
    emb = DistEmbedding(cfg.num_embeddings, cfg.dim, name="bench", init_func=_init)
    opt = SparseAdam(emb, lr=cfg.lr)
    lo, hi = emb.weight.local_range
    batches = _batches(cfg, lo, hi, cfg.iters + cfg.warmup)
    emb.weight.comm.barrier()

    def lookup(i: int) -> None:
        with torch.no_grad():
            emb(batches[i])

    def step(i: int) -> None:
        opt.zero_grad()
        emb(batches[i]).square().sum().backward()
        opt.step()

    lookups = _rate(lookup, cfg.iters, cfg.warmup)
    emb.weight.comm.barrier()
    steps = _rate(step, cfg.iters, cfg.warmup)
    shutdown_rpc()
    return {"lookups_per_s": lookups, "steps_per_s": steps}


def _reference(cfg: BenchConfig) -> Dict[str, float]:
    torch.set_num_threads(1)
    emb = torch.nn.Embedding(cfg.num_embeddings, cfg.dim, sparse=True)
    torch.nn.init.uniform_(emb.weight, -0.1, 0.1)
    opt = torch.optim.SparseAdam(emb.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = [torch.randint(0, cfg.num_embeddings, (cfg.batch_size,), generator=gen)
               for _ in range(cfg.iters + cfg.warmup)]

    def lookup(i: int) -> None:
        with torch.no_grad():
            emb(batches[i])

    def step(i: int) -> None:
        opt.zero_grad()
        emb(batches[i]).square().sum().backward()
        opt.step()

    return {"lookups_per_s": _rate(lookup, cfg.iters, cfg.warmup),
            "steps_per_s": _rate(step, cfg.iters, cfg.warmup)}


def run(cfg: BenchConfig) -> Dict[str, object]:
    from pyg_dist.testing import run_ranks

    per_rank = run_ranks(_worker, cfg.world_size, cfg, timeout=cfg.timeout, start_method="spawn")
    dist_lookups = min(r["lookups_per_s"] for r in per_rank)
    dist_steps = min(r["steps_per_s"] for r in per_rank)
    ref = _reference(cfg)  # after the ranks exit: nothing competes for the cores
    result: Dict[str, object] = {
        "benchmark": "embedding", **asdict(cfg),
        "dist_lookups_per_s": round(dist_lookups, 2),
        "dist_lookup_rows_per_s_all_ranks": round(
            sum(r["lookups_per_s"] for r in per_rank) * cfg.batch_size, 1),
        "dist_steps_per_s": round(dist_steps, 2),
        "ref_lookups_per_s": round(ref["lookups_per_s"], 2),
        "ref_steps_per_s": round(ref["steps_per_s"], 2),
        "lookup_ratio": round(dist_lookups / ref["lookups_per_s"], 4),
        "step_ratio": round(dist_steps / ref["steps_per_s"], 4),
        "per_rank": [{k: round(v, 2) for k, v in r.items()} for r in per_rank],
        "cpus": os.cpu_count(),
    }
    return result


def _parse(argv: List[str] = None) -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-embeddings", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--remote-fraction", type=float, default=0.5)
    parser.add_argument("--iters", type=int, default=50, help="timed batches per measure")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds for the whole distributed run")
    args = parser.parse_args(argv)
    if args.world_size < 2 or not 0.0 <= args.remote_fraction <= 1.0:
        parser.error("--world-size must be >= 2 and --remote-fraction in [0, 1]")
    return BenchConfig(**vars(args))


def main(argv: List[str] = None) -> None:
    cfg = _parse(argv)
    print(f"DistEmbedding {cfg.num_embeddings} x {cfg.dim} on {cfg.world_size} ranks, "
          f"batches of {cfg.batch_size} ids ({cfg.remote_fraction:.0%} remote)", flush=True)
    result = run(cfg)
    print(f"lookups/s per rank: dist {result['dist_lookups_per_s']}, "
          f"reference {result['ref_lookups_per_s']} -> ratio {result['lookup_ratio']}")
    print(f"steps/s (lookup+backward+SparseAdam): dist {result['dist_steps_per_s']}, "
          f"reference {result['ref_steps_per_s']} -> ratio {result['step_ratio']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
