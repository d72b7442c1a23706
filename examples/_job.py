"""Launching an example: command line, process group and partition, tear-down, plain
collectives, and the final JSON line.

Every example runs under ``torchrun`` (one process per trainer; ranks are spread over
the partitions in contiguous blocks) or as a plain ``python`` script (one process,
the partition folder must then hold a single partition). User code owns the process
group: :func:`setup` initialises it (gloo on CPU, NCCL with ``--device cuda``) with
``pyg_dist.init_process_group``, so every collective times out after ``--rpc-timeout``
and a lost rank is named; pyg_dist joins RPC through the same rendezvous.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist import (DistContext, LocalFeatureStore, LocalGraphStore, init_process_group,
                      shutdown_rpc)
from pyg_dist.format import io
from pyg_dist.format import PartitionMeta
from pyg_dist.rpc import health, runtime
from pyg_dist.store.memory import process_memory

# torch.distributed.rpc's own init passes a gloo Backend where a ProcessGroup is expected
# (a torch-internal deprecation warning, once per rank): keep the progress output clean.
warnings.filterwarnings("ignore", message=".*as a ProcessGroup.*", category=UserWarning)


# ---- command line ------------------------------------------------------------------
def parse_fanout(text: str) -> List[int]:
    """``"10,5"`` -> ``[10, 5]`` (``-1`` takes every neighbour)."""
    try:
        fanout = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not fanout or any(f < -1 for f in fanout):
        raise argparse.ArgumentTypeError(f"expected fan-outs >= -1, got {text!r}")
    return fanout


def base_parser(description: str, epochs: int, batch_size: int, lr: float, hidden: int,
                fanout: str = "10,5") -> argparse.ArgumentParser:
    """The arguments every example takes (defaults given per example)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--partition-dir", required=True, help="output of scripts/partition_graph.py")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=batch_size, help="seeds per batch per rank")
    p.add_argument("--num-neighbors", type=parse_fanout, default=parse_fanout(fanout),
                   help="fan-out per hop, e.g. 10,5 (one GNN layer per hop)")
    p.add_argument("--eval-neighbors", type=parse_fanout, default=None,
                   help="fan-out per hop for val/test (default: --num-neighbors; -1: all)")
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--hidden", type=int, default=hidden)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--num-workers", type=int, default=0,
                   help="sampler processes per trainer for training (0: sample in-process)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cpu: gloo; cuda: NCCL, one GPU per local rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rpc-timeout", type=float, default=60.0,
                   help="seconds before a silent peer is declared lost")
    p.add_argument("--skip-eval", action="store_true", help="train only (benchmarks)")
    p.add_argument("--log-every", type=int, default=50,
                   help="progress within an epoch (rank 0): a bar on a terminal, else a "
                        "line every N batches (0: none)")
    p.add_argument("--no-mmap", action="store_true",
                   help="read the partition into this process's memory instead of mapping "
                        "it (mapped: one copy per machine, shared by every trainer)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="save the training state here (model, optimizers, embeddings, loader "
                        "positions) and resume from it on start, e.g. after torchrun "
                        "--max-restarts restarted the job")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="save every N training batches (0: at the end of every epoch)")
    p.add_argument("--wire-dtype", choices=["bf16", "fp16"], default=None,
                   help="peers send float32 features as bfloat16/float16 (half the bytes "
                        "over the network, values rounded; default: as stored)")
    return p


# ---- set-up and tear-down -----------------------------------------------------------
@dataclass
class Job:
    """One trainer's view of the job: who it is, its partition and its device."""
    ctx: DistContext
    data: Tuple[LocalFeatureStore, LocalGraphStore]
    meta: PartitionMeta
    device: torch.device
    log_every: int = 50
    started: float = field(default_factory=time.perf_counter)
    open_s: float = float("nan")  # seconds to open the partition's stores
    mmap: bool = True
    memory: Dict[str, Any] = field(default_factory=dict)  # recorded by finish()
    resumed_from: Optional[int] = None  # the checkpoint step this run resumed from
    checkpoint: Dict[str, Any] = field(default_factory=dict)  # save/load figures

    @property
    def is_main(self) -> bool:
        return self.ctx.rank == 0

    @property
    def distributed(self) -> bool:
        return self.ctx.world_size > 1


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(args: argparse.Namespace) -> Job:
    """Initialises the process group (multi-process jobs) and opens this rank's partition.

    Raises:
        SystemExit: with a one-line message when the partition folder does not fit the
            job (e.g. 3 processes for 2 partitions).
    """
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    seed_everything(args.seed)
    ctx = DistContext.from_env(rpc_timeout=args.rpc_timeout)
    device = _device(args.device, ctx)
    if ctx.is_distributed:  # collectives time out after --rpc-timeout, naming a lost rank
        init_process_group("nccl" if device.type == "cuda" else "gloo", ctx)
    meta = io.read_meta(Path(args.partition_dir))
    try:
        pid = ctx.partition_id(meta.num_parts)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    start, mmap = time.perf_counter(), not args.no_mmap
    data = (LocalFeatureStore.from_partition(args.partition_dir, pid, mmap=mmap),
            LocalGraphStore.from_partition(args.partition_dir, pid, mmap=mmap))
    return Job(ctx, data, meta, device, log_every=args.log_every,
               open_s=time.perf_counter() - start, mmap=mmap)


def _device(name: str, ctx: DistContext) -> torch.device:
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but CUDA is not available")
    torch.cuda.set_device(ctx.local_rank % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def wrap_ddp(model: torch.nn.Module, job: Job) -> torch.nn.Module:
    """``model`` on the job's device, in DistributedDataParallel when there are peers."""
    model = model.to(job.device)
    if not job.distributed:
        return model
    ids = [job.device.index] if job.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def finish(job: Job, loaders: Sequence[Any]) -> None:
    """Closes the loaders, records memory (collective), leaves RPC (waits for the peers)
    and the process group."""
    for loader in loaders:
        loader.close()
    job.memory = memory(job)
    shutdown_rpc()
    if dist.is_initialized():
        dist.destroy_process_group()


def run(main: Callable[[], None]) -> None:
    """Runs ``main``; on an error prints the traceback and leaves at once (exit code 1).

    Leaving at once lets torchrun see the failure and stop the other ranks. A normal
    interpreter exit would first run pyg_dist's exit hook, whose graceful RPC shutdown
    waits (up to the RPC timeout) for peers that are blocked in a DDP collective
    waiting for this rank, so the job would hang for minutes before failing.
    """
    try:
        main()
    except SystemExit:
        raise
    except BaseException as exc:
        rank = os.environ.get("RANK", "0")
        peers = health.diagnose()
        print(f"[rank {rank}] failed:\n{traceback.format_exc()}"
              + (f"[rank {rank}] pyg_dist health: {peers}\n" if peers else ""),
              file=sys.stderr, flush=True)
        health.report_failure(exc)
        sys.stdout.flush()
        os._exit(1)


# ---- collectives on plain numbers ---------------------------------------------------
def all_sum(job: Job, values: Sequence[float]) -> List[float]:
    """Element-wise sum over ranks (float64; identity in a single process)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=job.device)
    if job.distributed:
        dist.all_reduce(t)
    return t.tolist()


def all_max(job: Job, value: int) -> int:
    t = torch.tensor([value], dtype=torch.long, device=job.device)
    if job.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def gather_cat(job: Job, values: Tensor) -> Tensor:
    """Concatenation of every rank's 1-d ``values`` (any lengths), in rank order."""
    values = values.to(job.device)
    if not job.distributed:
        return values
    n = torch.tensor([values.numel()], device=job.device)
    sizes = [torch.zeros_like(n) for _ in range(job.ctx.world_size)]
    dist.all_gather(sizes, n)
    width = int(max(s.item() for s in sizes))
    padded = torch.zeros(width, dtype=values.dtype, device=job.device)
    padded[:values.numel()] = values
    out = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(out, padded)
    return torch.cat([o[:int(s.item())] for o, s in zip(out, sizes)])


# ---- output -------------------------------------------------------------------------
def log(job: Job, message: str) -> None:
    """Progress line, printed by rank 0 only."""
    if job.is_main:
        print(message, flush=True)


def memory(job: Job) -> Dict[str, Any]:
    """Store opening time and memory of every rank (collective, before RPC and the
    process group are left), and which partitions this rank read directly from their
    files on this machine instead of over RPC."""
    mine = {"open_s": round(job.open_s, 4), **process_memory()}
    ranks = [mine]
    if job.distributed:
        ranks = [None] * job.ctx.world_size
        dist.all_gather_object(ranks, mine)
    group = runtime.current() if runtime.is_initialized() else None
    pss = [r["pss_mb"] for r in ranks]
    return {"mmap": job.mmap, "open_s": mine["open_s"], "rss_mb": mine["rss_mb"],
            "pss_mb": mine["pss_mb"], "open_s_max": max(r["open_s"] for r in ranks),
            "rss_mb_sum": _sum([r["rss_mb"] for r in ranks]), "pss_mb_sum": _sum(pss),
            "direct_parts": sorted(group.direct) if group is not None else []}


def _sum(values: List[Any]) -> Any:
    return None if any(v is None for v in values) else round(sum(values), 1)


def emit(job: Job, results: Dict[str, Any], args: argparse.Namespace) -> None:
    """The example's ONE JSON line of results (rank 0 only), after everything else."""
    if not job.is_main:
        return
    common = {"num_parts": job.meta.num_parts, "world_size": job.ctx.world_size,
              "epochs": args.epochs, "batch_size": args.batch_size,
              "num_workers": args.num_workers, "device": job.device.type,
              "wire_dtype": args.wire_dtype, "resumed_from": job.resumed_from,
              **job.checkpoint,
              "total_s": round(time.perf_counter() - job.started, 2), **job.memory}
    clean = {k: (None if isinstance(v, float) and v != v else v) for k, v in results.items()}
    print(json.dumps({**clean, **common}), flush=True)  # NaN (not measured) -> null
