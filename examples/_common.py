"""Pieces shared by the pyg_dist examples: launch set-up, epoch timing, distributed
metrics and the final JSON line.

Every example runs under ``torchrun`` (one process per trainer; ranks are spread over
the partitions in contiguous blocks) or as a plain ``python`` script (one process,
the partition folder must then hold a single partition). User code owns the process
group: :func:`setup` initialises it (gloo on CPU, NCCL with ``--device cuda``)
before any loader exists; pyg_dist joins RPC through the same rendezvous.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      node_split, shutdown_rpc)
from pyg_dist.partition import PartitionMeta, io

# Test hook: "RANK:BATCH" makes that rank SIGKILL itself before its BATCH-th training
# batch of the first epoch (tests/distributed/test_training.py checks failure handling).
DIE_ENV = "PYG_DIST_EXAMPLE_DIE"

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
    return p


# ---- set-up and tear-down -----------------------------------------------------------
@dataclass
class Job:
    """One trainer's view of the job: who it is, its partition and its device."""
    ctx: DistContext
    data: Tuple[LocalFeatureStore, LocalGraphStore]
    meta: PartitionMeta
    device: torch.device
    started: float = field(default_factory=time.perf_counter)

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
    if ctx.is_distributed:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size,
                                timeout=timedelta(seconds=max(2 * args.rpc_timeout, 60)))
    meta = io.read_meta(Path(args.partition_dir))
    try:
        pid = ctx.partition_id(meta.num_parts)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    data = (LocalFeatureStore.from_partition(args.partition_dir, pid),
            LocalGraphStore.from_partition(args.partition_dir, pid))
    return Job(ctx, data, meta, device)


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
    """Closes the loaders, leaves RPC (waits for the peers) and the process group."""
    for loader in loaders:
        loader.close()
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
    except BaseException:
        rank = os.environ.get("RANK", "0")
        print(f"[rank {rank}] failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
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


def num_classes(job: Job, node_type: Optional[str] = None) -> int:
    """Classes of ``y`` (max label over every partition, plus one)."""
    features = job.data[0]
    y = features.tensor(features.meta.node_type(node_type), "y")
    return all_max(job, int(y.max()) if y.numel() else -1) + 1


def feat_dim(job: Job, node_type: Optional[str] = None) -> int:
    features = job.data[0]
    return int(features.tensor(features.meta.node_type(node_type), "x").size(1))


def normalize_rows(batch: Any) -> Any:
    """Batch transform: every node's ``x`` divided by its row sum (PyG's NormalizeFeatures)."""
    for store in batch.node_stores:
        if "x" in store:
            store.x = store.x / store.x.sum(-1, keepdim=True).clamp_(min=1e-12)
    return batch


# ---- epochs -------------------------------------------------------------------------
@dataclass
class EpochStats:
    """Totals of one epoch over every rank (loss and accuracy are means per seed)."""
    loss: float
    acc: float
    seconds: float
    batches: int
    wait_s: float

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0

    @property
    def wait_frac(self) -> float:
        """Fraction of the epoch the trainer was blocked waiting for the next batch."""
        return self.wait_s / self.seconds if self.seconds > 0 else 0.0


class TimedIter:
    """Iterates ``loader`` and adds up the time spent blocked in ``next()``."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.wait_s = 0.0
        self.batches = 0

    def __iter__(self) -> Iterator[Any]:
        start = time.perf_counter()
        it = iter(self.loader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                self.wait_s += time.perf_counter() - start
                return
            self.wait_s += time.perf_counter() - start
            self.batches += 1
            yield batch
            start = time.perf_counter()


Step = Callable[[Any], Tuple[float, float, float]]  # batch -> (loss sum, correct, count)


def run_epoch(job: Job, loader: Any, step: Step) -> EpochStats:
    """One pass of ``loader`` through ``step``; totals are summed over ranks.

    Every rank runs the same number of batches (the loader pads), so DDP's
    per-batch gradient all-reduce never waits on a finished rank.
    """
    die_at = _die_at(job)
    timed = TimedIter(loader)
    start = time.perf_counter()
    loss = correct = count = 0.0
    for i, batch in enumerate(timed):
        if i == die_at:
            _die(job, i)
        batch_loss, batch_correct, batch_count = step(batch)
        loss, correct, count = loss + batch_loss, correct + batch_correct, count + batch_count
    seconds = time.perf_counter() - start
    loss, correct, count, wait = all_sum(job, [loss, correct, count, timed.wait_s])
    world = job.ctx.world_size
    return EpochStats(loss / max(count, 1), correct / max(count, 1), seconds,
                      timed.batches, wait / world)


def _die_at(job: Job) -> Optional[int]:
    spec = os.environ.get(DIE_ENV)
    if not spec:
        return None
    rank, batch = (int(v) for v in spec.split(":"))
    os.environ.pop(DIE_ENV)  # first epoch only
    return batch if rank == job.ctx.rank else None


def _die(job: Job, batch: int) -> None:
    print(f"[rank {job.ctx.rank}] {DIE_ENV}: killing myself (pid {os.getpid()}) before batch "
          f"{batch}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def summarize(job: Job, history: List[EpochStats]) -> Dict[str, float]:
    """Epoch timings for the JSON line (steady state: epochs after the first, if any)."""
    steady = history[1:] or history
    seconds = sum(h.seconds for h in steady)
    return {"epoch_s": round(seconds / len(steady), 4),
            "first_epoch_s": round(history[0].seconds, 4),
            "batches_per_epoch": history[-1].batches,
            "batches_per_s": round(sum(h.batches for h in steady) / max(seconds, 1e-9), 3),
            "loader_wait_frac": round(sum(h.wait_s for h in steady) / max(seconds, 1e-9), 4),
            "train_loss": round(history[-1].loss, 4), "train_acc": round(history[-1].acc, 4)}


# ---- node classification ------------------------------------------------------------
Predict = Callable[[Any], Tuple[Tensor, Tensor]]  # batch -> (logits of its seeds, labels)


def splits(args: argparse.Namespace) -> Tuple[str, ...]:
    """The node splits an example loads: train, then val and test unless --skip-eval."""
    return ("train",) if args.skip_eval else ("train", "val", "test")


def node_loaders(job: Job, args: argparse.Namespace, *split_names: str,
                 node_type: Optional[str] = None, **options: Any) -> List[DistNeighborLoader]:
    """One loader per split over this rank's share of it (``node_split``).

    The first (training) loader shuffles, samples with ``--num-neighbors`` in
    ``--num-workers`` processes and pads every rank to the same number of batches, as
    DDP's per-batch gradient all-reduce needs. The others (evaluation) go in order
    with ``--eval-neighbors``, in-process, each seed exactly once
    (``even_batches=False``: the unwrapped model runs no collective per batch, and a
    rank that finishes early keeps serving its partition to the others over RPC).
    ``options`` go to every loader.
    """
    loaders = []
    for i, split in enumerate(split_names):
        train = i == 0
        ids = node_split(job.data, split, job.ctx, node_type=node_type)
        fanout = args.num_neighbors if train else (args.eval_neighbors or args.num_neighbors)
        loaders.append(DistNeighborLoader(
            data=job.data, num_neighbors=fanout,
            input_nodes=ids if node_type is None else (node_type, ids),
            batch_size=args.batch_size, shuffle=train,
            num_workers=args.num_workers if train else 0, device=job.device,
            even_batches=train, seed=args.seed + i, current_ctx=job.ctx, **options))
    return loaders


def classify_step(predict: Predict, optimizers: Sequence[Any]) -> Step:
    """A training step: cross-entropy of ``predict(batch)``, then every optimizer steps."""
    def step(batch: Any) -> Tuple[float, float, float]:
        for optimizer in optimizers:
            optimizer.zero_grad()
        out, y = predict(batch)
        loss = F.cross_entropy(out, y)
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
        return float(loss.detach()) * y.numel(), int((out.argmax(-1) == y).sum()), y.numel()
    return step


@torch.no_grad()
def accuracy(job: Job, model: torch.nn.Module, loader: Any, predict: Predict) -> float:
    """Exact accuracy over every rank's seeds (one all-reduce of the counts at the end)."""
    model.eval()
    correct = total = 0
    for batch in loader:
        out, y = predict(batch)
        correct += int((out.argmax(-1) == y).sum())
        total += y.numel()
    model.train()
    correct, total = all_sum(job, [correct, total])
    return correct / max(total, 1)


def fit(job: Job, args: argparse.Namespace, loaders: Sequence[Any], step: Step,
        accuracy_of: Callable[[Any], float]) -> Dict[str, Any]:
    """``--epochs`` epochs of ``step`` over ``loaders[0]``, validation accuracy after
    each (``loaders[1]``) and test accuracy at the end (``loaders[2]``) when those
    exist; prints a progress line per epoch and returns the results for the JSON line."""
    history: List[EpochStats] = []
    val_acc = test_acc = float("nan")
    evaluate = len(loaders) >= 3
    for epoch in range(1, args.epochs + 1):
        stats = run_epoch(job, loaders[0], step)
        history.append(stats)
        start = time.perf_counter()
        if evaluate:
            val_acc = accuracy_of(loaders[1])
        log(job, f"epoch {epoch:3d} | loss {stats.loss:.4f} | train acc {stats.acc:.4f} | "
                 f"val acc {val_acc:.4f} | epoch {stats.seconds:.2f}s "
                 f"({stats.batches_per_s:.1f} batches/s, waiting on loader "
                 f"{100 * stats.wait_frac:.0f}%) | eval {time.perf_counter() - start:.2f}s")
    if evaluate:
        test_acc = accuracy_of(loaders[2])
    log(job, f"test acc {test_acc:.4f}")
    return {"test_acc": round(test_acc, 4), "val_acc": round(val_acc, 4),
            **summarize(job, history)}


# ---- output -------------------------------------------------------------------------
def log(job: Job, message: str) -> None:
    """Progress line, printed by rank 0 only."""
    if job.is_main:
        print(message, flush=True)


def emit(job: Job, results: Dict[str, Any], args: argparse.Namespace) -> None:
    """The example's ONE JSON line of results (rank 0 only), after everything else."""
    if not job.is_main:
        return
    common = {"num_parts": job.meta.num_parts, "world_size": job.ctx.world_size,
              "epochs": args.epochs, "batch_size": args.batch_size,
              "num_workers": args.num_workers, "device": job.device.type,
              "total_s": round(time.perf_counter() - job.started, 2)}
    clean = {k: (None if isinstance(v, float) and v != v else v) for k, v in results.items()}
    print(json.dumps({**clean, **common}), flush=True)  # NaN (not measured) -> null
