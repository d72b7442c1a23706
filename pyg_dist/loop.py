"""What every training script under ``torchrun`` repeats, in a few calls.

::

    from pyg_dist import loop

    args = loop.parser("my task", epochs=20).parse_args()  # the flags every job takes
    ctx, device = loop.setup(args.device, args.seed)  # torchrun's env, device, group
    data = loop.load_partition("parts/cora", ctx)        # this rank's partition
    ...                                          # model, loaders, state = {"model": ...}
    epochs = loop.Epochs(20, train_loader, ctx, state, "ckpt")  # resumes from "ckpt"
    for epoch in epochs:                         # the epochs left, timed, then saved
        loss = train(...)                        # e.g. loop.reduce([loss_sum, n]) inside
        epochs.log(loss=loss, val_acc=test(...))  # one line on rank 0
    loop.finish(ctx, [train_loader], {"test_acc": acc, **epochs.results()})

:func:`finish` prints ONE JSON line of results on rank 0, last. Each piece is a few lines
a script may as well hold itself; they live here so the examples stay short and agree on
their output (progress within an epoch comes from :func:`pyg_dist.track`). Plain
``python script.py`` (no ``torchrun``) runs as one rank.
"""
from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist import checkpoint
from pyg_dist.checkpoint import CheckpointInfo
from pyg_dist.format import read_meta
from pyg_dist.rpc import DistContext, init_process_group, shutdown_rpc
from pyg_dist.rpc._process_group import ensure_process_group
from pyg_dist.store import LocalFeatureStore, LocalGraphStore

__all__ = ["parser", "fanout", "setup", "load_partition", "log", "reduce", "resume", "Epochs", "result_line",
           "finish", "rank_ordered_gradients"]

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def fanout(text: str) -> List[int]:
    """``"10,5"`` -> ``[10, 5]``: neighbours sampled per hop (``-1``: all of them)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or any(v < -1 for v in values):
        raise argparse.ArgumentTypeError(f"expected fan-outs >= -1, got {text!r}")
    return values


def parser(description: str, **defaults: Any) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with the flags a distributed training script takes:
    ``--partition-dir`` (required), ``--epochs``, ``--batch-size`` (seeds per batch and
    rank), ``--num-neighbors`` (``10,5``: a list, one fan-out per hop), ``--lr``,
    ``--num-workers`` (sampler processes per rank), ``--checkpoint-dir`` (save there after
    every epoch, resume from there), ``--device`` (``cpu``/``cuda``) and ``--seed``.

    Args:
        description (str): the script's one-line description.
        **defaults: other default values, by destination (``epochs=5``,
            ``num_neighbors=[25, 10]``); add the script's own flags to the result.
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--partition-dir", required=True, help="output of pyg-dist-partition")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256, help="seeds per batch and rank")
    p.add_argument("--num-neighbors", type=fanout, default=[10, 5],
                   help="fan-out per hop, e.g. 10,5 (one GNN layer per hop)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--num-workers", type=int, default=0, help="sampler processes per rank")
    p.add_argument("--checkpoint-dir", default=None, help="save here, resume from here")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(**defaults)
    return p


def setup(device: str = "cpu", seed: int = 0, rpc_timeout: Optional[float] = None
          ) -> Tuple[DistContext, torch.device]:
    """This process's place in the job (from ``torchrun``'s environment), its device,
    and the process group when there are peers (gloo on CPU, NCCL on GPUs: gloo when
    ranks share a GPU, which NCCL refuses).

    Args:
        device (str): ``"cpu"`` or ``"cuda"`` (one GPU per local rank).
        seed (int): seeds torch's generator, the same on every rank (same model init).
        rpc_timeout (float, optional): seconds before a silent peer is declared lost
            (default: ``PYG_DIST_RPC_TIMEOUT`` or the library's default).

    Raises:
        ValueError: for another ``device``, or ``"cuda"`` without CUDA.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but CUDA is not available")
    # torch.distributed.rpc passes a gloo Backend where a ProcessGroup is expected (a
    # torch-internal deprecation warning, once per rank): keep the output readable
    warnings.filterwarnings("ignore", message=".*as a ProcessGroup.*", category=UserWarning)
    torch.manual_seed(seed)
    ctx = DistContext.from_env(rpc_timeout=rpc_timeout)
    place = torch.device("cpu")
    if device == "cuda":
        place = torch.device("cuda", ctx.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(place)
    if ctx.is_distributed:  # collectives time out after rpc_timeout, naming a lost rank
        init_process_group(_backend(place, ctx), ctx)
    return ctx, place


def _backend(place: torch.device, ctx: DistContext) -> str:
    """NCCL when every local rank has a GPU of its own; gloo otherwise (NCCL refuses two
    ranks on one GPU; gloo all-reduces CUDA tensors through host memory, slower)."""
    if place.type != "cuda":
        return "gloo"
    gpus = torch.cuda.device_count()
    if ctx.local_world_size > gpus:
        if ctx.rank == 0:
            warnings.warn(f"{ctx.local_world_size} ranks share {gpus} GPU(s) on this "
                          f"machine: NCCL needs one GPU per rank, so the process group uses "
                          f"gloo (gradients are all-reduced through host memory); start at "
                          f"most {gpus} rank(s) per machine for NCCL", stacklevel=3)
        return "gloo"
    return "nccl"


def load_partition(path: str, ctx: DistContext, mmap: bool = True
                   ) -> Tuple[LocalFeatureStore, LocalGraphStore]:
    """The partition of ``path`` this rank serves (``ctx.partition_id``), as the
    ``(feature store, graph store)`` pair loaders take; ``data[1].meta`` describes the
    whole partitioning.

    Args:
        path (str): a partition folder (``pyg-dist-partition --out``).
        ctx (DistContext): this process.
        mmap (bool): map the partition's files (one copy per machine) instead of reading
            them into this process's memory.
    """
    pid = ctx.partition_id(read_meta(path).num_parts)
    return (LocalFeatureStore.from_partition(path, pid, mmap=mmap),
            LocalGraphStore.from_partition(path, pid, mmap=mmap))


def log(ctx: DistContext, message: str) -> None:
    """Prints ``message`` on rank 0 (other ranks stay quiet)."""
    if ctx.rank == 0:
        print(message, flush=True)


def reduce(values: Sequence[float], device: Optional[torch.device] = None,
           op: str = "sum") -> List[float]:
    """``values`` combined element-wise over every rank (a collective).

    Args:
        values: the same number of values on every rank.
        device: where the collective runs (default: CPU; CPU values go over
            pyg_dist's own gloo group when the default group is NCCL, which takes GPU
            tensors only).
        op (str): ``"sum"``, ``"max"`` or ``"min"``.

    Returns:
        the combined values; ``values`` themselves without a process group.
    """
    if op not in _OPS:
        raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    if dist.is_initialized():
        group = None
        if t.device.type == "cpu" and dist.get_backend() != "gloo":
            group = ensure_process_group(DistContext.from_env())
        dist.all_reduce(t, op=_OPS[op], group=group)
    return t.tolist()


def resume(path: str, state: Dict[str, Any], ctx: DistContext) -> Optional[CheckpointInfo]:
    """Loads the newest checkpoint under ``path`` into ``state``, if there is one
    (:func:`pyg_dist.checkpoint.load`, collective), and says on rank 0 what it did.

    Loaders in ``state`` continue where they were saved: ``loader.epoch`` is the last
    epoch started, so ``range(loader.epoch + 1, epochs + 1)`` trains what is left.

    Returns:
        what was loaded, or ``None`` when there is no checkpoint yet.
    """
    info = checkpoint.load(path, state=state)
    if info is None:
        log(ctx, f"checkpoint: none in {path} yet, starting from scratch")
        return None
    how = "exactly" if info.exact else \
        f"from the next epoch's start (saved by {info.world_size} ranks)"
    where = ""
    if info.positions:  # the first loader's (0-based epoch, batches done in it)
        epoch, batch = info.positions[0]
        where = f"epoch {epoch + 1} batch {batch} "
    log(ctx, f"checkpoint: resumed {how} at {where}step {info.step} from {info.path}")
    return info


class Epochs:
    """The epochs left to train: resumed from a checkpoint, timed, logged and saved.

    Iterating first loads the newest checkpoint of ``checkpoint_dir`` into ``state``
    (:func:`resume`), then yields the epoch numbers left (1-based, from where ``loader``
    was saved); after each epoch's body it saves ``state`` there (collective; step = the
    epoch).

    Args:
        num_epochs (int): the epochs of the whole run.
        loader: the training loader (its ``epoch`` says where a resumed run continues).
        ctx (DistContext): this process.
        state (dict, optional): what a checkpoint holds (:mod:`pyg_dist.checkpoint`).
        checkpoint_dir (str, optional): where to save and resume from (``None``: never).
    """

    def __init__(self, num_epochs: int, loader: Any, ctx: DistContext,
                 state: Optional[Dict[str, Any]] = None,
                 checkpoint_dir: Optional[str] = None) -> None:
        if checkpoint_dir is not None and not state:
            raise ValueError("checkpoint_dir needs the state to save: pass state={...}")
        self.num_epochs, self.loader, self.ctx = num_epochs, loader, ctx
        self.state, self.checkpoint_dir = state, checkpoint_dir
        self.seconds: List[float] = []
        self.metrics: Dict[str, float] = {}
        self.started = 0.0

    def __iter__(self) -> Iterator[int]:
        if self.checkpoint_dir is not None:
            resume(self.checkpoint_dir, self.state or {}, self.ctx)
        for epoch in range(self.loader.epoch + 1, self.num_epochs + 1):
            self.epoch, self.started = epoch, time.perf_counter()
            yield epoch
            if self.checkpoint_dir is not None:
                checkpoint.save(self.checkpoint_dir, epoch, state=self.state)
        self.state = None  # let the model go: a DDP wrapper must not outlive its group

    def log(self, **metrics: float) -> None:
        """Prints ``epoch E | name value | ... | seconds`` on rank 0 and records the epoch's
        time and ``metrics`` (the last ones go into :meth:`results`)."""
        self.seconds.append(time.perf_counter() - self.started)
        self.metrics = dict(metrics)
        parts = [f"{name} {value:.4f}" for name, value in metrics.items()]
        log(self.ctx, " | ".join([f"epoch {self.epoch:3d}", *parts,
                                  f"{self.seconds[-1]:.2f}s"]))

    def results(self) -> Dict[str, Any]:
        """The last metrics logged, ``epochs``, mean ``epoch_s`` (None when no epoch was
        left) and ``world_size``: the training part of a result line."""
        mean = sum(self.seconds) / len(self.seconds) if self.seconds else None
        return {**self.metrics, "epochs": self.num_epochs, "epoch_s": mean,
                "world_size": self.ctx.world_size}


def rank_ordered_gradients(ddp: Any) -> Any:
    """Makes a ``DistributedDataParallel`` model sum its gradients in rank order (each
    bucket all-gathered, then rank 0's + rank 1's + ..., divided by the world size), so
    that a job restarted from a checkpoint trains bit for bit as the run it continues,
    on any number of ranks. Returns ``ddp``.

    DDP's own all-reduce adds the ranks' gradients in an order that two runs of the same
    step need not share: on 3 gloo ranks the first steps after a restart came out a
    last bit away from the run that was never stopped (~1e-9 on the weights after 4
    steps), with batches, weights and optimizer state restored exactly. With 2 ranks the
    order cannot matter (``a + b == b + a``). The price: each bucket travels to every
    rank (``world_size`` times an all-reduce's memory and traffic), so keep it to models
    whose gradients are small next to a batch's features.
    """
    group = ddp.process_group
    world = dist.get_world_size(group)

    def hook(_state, bucket):  # unannotated: DDP checks the annotations it is given
        grads = bucket.buffer()
        parts = [torch.empty_like(grads) for _ in range(world)]
        gathered = dist.all_gather(parts, grads, group=group, async_op=True).get_future()

        def total(_fut: Any) -> Tensor:
            out = parts[0]  # gathered into buffers of our own: summed in place
            for part in parts[1:]:
                out += part
            return out.div_(world)
        return gathered.then(total)

    ddp.register_comm_hook(None, hook)
    return ddp


def result_line(results: Dict[str, Any], digits: int = 4) -> str:
    """``results`` as one line of JSON: floats rounded to ``digits``, NaN and infinities
    as ``null`` (JSON has neither)."""
    def plain(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, digits) if math.isfinite(value) else None
        return value
    return json.dumps({key: plain(value) for key, value in results.items()})


def finish(ctx: DistContext, loaders: Iterable[Any] = (),
           results: Optional[Dict[str, Any]] = None) -> None:
    """Ends the job: closes ``loaders``, leaves RPC and the process group, and prints
    ``results`` as ONE JSON line on rank 0 (:func:`result_line`), last: after every
    rank has left RPC.

    Free ``DistributedDataParallel`` wrappers before (``del ddp``): a DDP reducer that
    outlives its process group can deadlock with gloo's threads when it is freed.
    """
    for loader in loaders:
        loader.close()
    shutdown_rpc()
    if dist.is_initialized():
        # every rank has left RPC before rank 0 prints: what a peer logs while it shuts
        # down (TensorPipe's benign "pipe closed" when the leader hangs up first) comes
        # before the result line, never after it
        dist.barrier()
        dist.destroy_process_group()
    if results is not None and ctx.rank == 0:
        # one write: other ranks may share this pipe
        print(result_line(results) + "\n", end="", flush=True)
