"""Distributed node classification: GraphSAGE in DistributedDataParallel over a
partitioned graph.

    python scripts/partition_graph.py --dataset Cora --root data/planetoid --num-parts 2 \\
        --out parts/cora
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29511 \\
        examples/node_classification.py --partition-dir parts/cora --epochs 20

Each rank loads partition ``rank // (world_size // num_parts)``, trains on its share of
the ``train`` split (``node_split``) and evaluates its share of ``val``/``test``. Rank 0
prints progress (a bar on a terminal, else a line every ``--log-every`` batches with
batches/s, seeds/s and the time left), a line per epoch and, last, ONE JSON line of
results.

Training loaders pad every rank to the same number of batches (``even_batches=True``,
the default): DDP all-reduces gradients every batch. Evaluation runs the unwrapped model
(no collective per batch) with ``even_batches=False``: each rank sees each of its seeds
exactly once, and one ``all_reduce`` of the correct/total counts makes accuracies exact.

``--checkpoint-dir DIR`` saves model, optimizer and loader positions (every
``--checkpoint-every`` batches, or every epoch) and resumes from them on start, e.g. after
``torchrun --max-restarts=1`` restarted the job. After training, ``--layerwise-eval``
computes the test accuracy from exact layer-wise inference over every node
(``pyg_dist.infer``) and ``--export DIR`` writes every node's output, in the dataset's
node ids, to ``DIR`` (read it back with ``pyg_dist.inference.read_export``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      checkpoint, init_process_group, node_split, shutdown_rpc)
from pyg_dist.inference import export

# torch.distributed.rpc passes a gloo Backend where a ProcessGroup is expected (a
# torch-internal deprecation warning, once per rank): keep the output readable.
warnings.filterwarnings("ignore", message=".*as a ProcessGroup.*", category=UserWarning)


# ---- arguments ----------------------------------------------------------------------
def fanout(text: str) -> List[int]:
    """``"10,5"`` -> ``[10, 5]`` (``-1`` takes every neighbour)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or any(v < -1 for v in values):
        raise argparse.ArgumentTypeError(f"expected fan-outs >= -1, got {text!r}")
    return values


def budget(text: str) -> Union[float, int]:
    """``0.1`` -> a fraction of the halo nodes; ``200MB``, ``2GB`` -> bytes."""
    upper = text.strip().upper()
    try:
        for unit, scale in (("KB", 1e3), ("MB", 1e6), ("GB", 1e9)):
            if upper.endswith(unit):
                return int(float(upper[:-2]) * scale)
        value = float(upper)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction or a size, got {text!r}")
    return int(value) if value > 1 or upper.isdigit() else value


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="GraphSAGE node classification with pyg_dist")
    p.add_argument("--partition-dir", required=True, help="output of scripts/partition_graph.py")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256, help="seeds per batch per rank")
    p.add_argument("--num-neighbors", type=fanout, default=[10, 5],
                   help="fan-out per hop, e.g. 10,5 (one GNN layer per hop)")
    p.add_argument("--eval-neighbors", type=fanout, default=None,
                   help="fan-out per hop for val/test (default: --num-neighbors; -1: all)")
    p.add_argument("--sampling-strategy", choices=["neighbor", "labor"], default="neighbor",
                   help="of the training loader: 'labor' draws the same neighbours for "
                        "seeds that share them (fewer nodes and bytes per batch)")
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--num-workers", type=int, default=0,
                   help="sampler processes per trainer for training (0: sample in-process)")
    p.add_argument("--concurrency", type=int, default=2, help="batches in flight per sampler")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cpu: gloo; cuda: NCCL, one GPU per local rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rpc-timeout", type=float, default=60.0,
                   help="seconds before a silent peer is declared lost")
    p.add_argument("--skip-eval", action="store_true", help="train only")
    p.add_argument("--log-every", type=int, default=50,
                   help="progress within an epoch off a terminal: a line every N batches "
                        "(0: none)")
    p.add_argument("--no-mmap", action="store_true",
                   help="read the partition into memory instead of mapping its files")
    p.add_argument("--feature-cache", type=budget, default=None,
                   help="cache the most referenced remote nodes' features for training: a "
                        "fraction of the halo nodes (0.1) or bytes (200MB)")
    p.add_argument("--wire-dtype", choices=["bf16", "fp16"], default=None,
                   help="peers send float32 features as bfloat16/float16 (half the bytes)")
    p.add_argument("--normalize-features", action="store_true",
                   help="row-normalise x (like PyG's NormalizeFeatures; good for Planetoid)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="save the training state here and resume from it on start")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="save every N training batches (0: at the end of every epoch)")
    p.add_argument("--layerwise-eval", action="store_true",
                   help="after training, test accuracy from exact layer-wise inference")
    p.add_argument("--export", metavar="DIR", default=None,
                   help="after training, write every node's output to DIR (dataset ids)")
    args = p.parse_args()
    if (args.layerwise_eval or args.export) and args.normalize_features:
        p.error("--layerwise-eval/--export read the stored features, which "
                "--normalize-features does not change: use one or the other")
    return args


def log(ctx: DistContext, message: str) -> None:
    if ctx.rank == 0:
        print(message, flush=True)


def all_reduce(values: List[float], device: torch.device, op: Any = None) -> List[float]:
    """Element-wise sum (or ``op``) over ranks; the values themselves in one process."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t.tolist()


# ---- data ---------------------------------------------------------------------------
def normalize_rows(batch: Any) -> Any:
    """Batch transform: ``x`` divided by its row sums (PyG's NormalizeFeatures)."""
    batch.x = batch.x / batch.x.sum(-1, keepdim=True).clamp_(min=1e-12)
    return batch


def make_loaders(args: argparse.Namespace, ctx: DistContext, data: Tuple[Any, Any],
                 device: torch.device) -> List[DistNeighborLoader]:
    """Training loader (shuffled, padded, ``--num-workers``), then val and test loaders
    (in order, each seed once) unless ``--skip-eval``."""
    splits = ["train"] if args.skip_eval else ["train", "val", "test"]
    loaders = []
    for i, split in enumerate(splits):
        train = split == "train"
        loaders.append(DistNeighborLoader(
            data=data, input_nodes=node_split(data, split, ctx),
            num_neighbors=args.num_neighbors if train else
            (args.eval_neighbors or args.num_neighbors),
            batch_size=args.batch_size, shuffle=train, even_batches=train,
            num_workers=args.num_workers if train else 0, concurrency=args.concurrency,
            feature_cache=args.feature_cache if train else None, wire_dtype=args.wire_dtype,
            transform=normalize_rows if args.normalize_features else None,
            device=device, seed=args.seed + i, current_ctx=ctx,
            sampling_strategy=args.sampling_strategy if train else "neighbor"))
    return loaders


# ---- training and evaluation --------------------------------------------------------
class Trainer:
    """The training loop's state: model, optimizer, step count and checkpoints."""

    def __init__(self, args: argparse.Namespace, ctx: DistContext, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, loaders: List[DistNeighborLoader]) -> None:
        self.args, self.ctx, self.model, self.optimizer = args, ctx, model, optimizer
        self.loaders, self.step, self.resumed_from = loaders, 0, None
        self.device = loaders[0].device

    def state(self) -> dict:
        """What a checkpoint holds, by name: anything with state_dict()/load_state_dict()."""
        return {"model": self.model, "optimizer": self.optimizer,
                **{f"loader{i}": loader for i, loader in enumerate(self.loaders)}}

    def resume(self) -> None:
        """Loads ``--checkpoint-dir``'s newest checkpoint, if there is one (collective)."""
        info = checkpoint.load(self.args.checkpoint_dir, state=self.state())
        if info is None:
            log(self.ctx, f"checkpoint: none in {self.args.checkpoint_dir} yet, starting "
                          f"from scratch")
            return
        self.step = self.resumed_from = info.step
        epoch, batch = info.positions[0]
        how = "exactly" if info.exact else \
            f"from the next epoch's start: saved by {info.world_size} ranks"
        log(self.ctx, f"checkpoint: resumed {how} at epoch {epoch + 1} batch {batch} step "
                      f"{info.step} from {info.path}")

    def save(self, epoch: int) -> None:
        checkpoint.save(self.args.checkpoint_dir, self.step,
                        state={**self.state(), "epoch": epoch})

    def fit(self, validate: Optional[Callable[[], float]], metric: str
            ) -> Tuple[Optional[float], dict]:
        """Trains the epochs left (from where a checkpoint left off), validating after
        each; returns the last validation score and the training figures."""
        val = loss = acc = None
        seconds: List[float] = []
        batches = 0
        for epoch in range(self.loaders[0].epoch + 1, self.args.epochs + 1):
            start = time.perf_counter()
            loss, acc, batches = self.train_epoch(epoch)
            seconds.append(time.perf_counter() - start)
            val = validate() if validate is not None else None
            log(self.ctx, f"epoch {epoch:3d} | loss {loss:.4f} | train acc {acc:.4f} | "
                          f"{metric} {val if val is not None else float('nan'):.4f} | "
                          f"{seconds[-1]:.2f}s ({batches / max(seconds[-1], 1e-9):.1f} "
                          f"batches/s)")
        steady = seconds[1:] or seconds  # the first epoch warms up
        return val, {"train_loss": loss, "train_acc": acc,
                     "epoch_s": sum(steady) / len(steady) if steady else None,
                     "batches_per_epoch": batches, "resumed_from": self.resumed_from}

    def train_epoch(self, epoch: int) -> Tuple[float, float, int]:
        """One pass over the training loader: (mean loss, accuracy) over every rank, and
        the batches trained."""
        args, loader = self.args, self.loaders[0]
        self.model.train()
        loss_sum = correct = count = batches = 0
        progress = pyg_dist.track(loader, f"epoch {epoch} train", stream=sys.stdout,
                                  enabled=self.ctx.rank == 0 and args.log_every > 0,
                                  every=args.log_every, unit="batches",
                                  count=("seeds", lambda b: b.batch_size))
        for batch in progress:
            self.optimizer.zero_grad()
            out = self.model(batch.x, batch.edge_index)[:batch.batch_size]
            y = batch.y[:batch.batch_size]
            loss = F.cross_entropy(out, y)
            loss.backward()
            self.optimizer.step()
            loss_sum += loss.item() * y.numel()
            correct += int((out.argmax(-1) == y).sum())
            count += y.numel()
            self.step, batches = self.step + 1, batches + 1
            if args.checkpoint_dir and args.checkpoint_every and \
                    self.step % args.checkpoint_every == 0:
                self.save(epoch)
        if args.checkpoint_dir and not args.checkpoint_every:
            self.save(epoch)
        loss_sum, correct, count = all_reduce([loss_sum, correct, count], self.device)
        return loss_sum / max(count, 1), correct / max(count, 1), batches


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DistNeighborLoader, device: torch.device) -> float:
    """Exact accuracy over every rank's seeds."""
    model.eval()
    correct = total = 0
    for batch in loader:
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    correct, total = all_reduce([correct, total], device)
    return correct / max(total, 1)


def infer_all(args: argparse.Namespace, ctx: DistContext, model: torch.nn.Module,
              data: Tuple[LocalFeatureStore, LocalGraphStore], device: torch.device) -> dict:
    """Exact layer-wise inference over every node: test accuracy and/or an export."""
    out = pyg_dist.infer(model, data, device=device, ctx=ctx)
    results: dict = {}
    if args.layerwise_eval:
        features = data[0]
        lo, hi = out.local_range             # relabelled ids of the rows this rank computed
        test = features.split_ids("test")    # relabelled ids of the partition's test nodes
        test = test[(test >= lo) & (test < hi)]
        pred = out.local_data[test - lo].argmax(-1)
        y = features.gather(features.resolve(None), "y", test)
        correct, total = all_reduce([float((pred == y).sum()), float(test.numel())], device)
        results["layerwise_test_acc"] = round(correct / max(total, 1.0), 4)
    if args.export:
        export(out, args.partition_dir, args.export, overwrite=True, ctx=ctx)
        results["export"] = args.export
    return results


# ---- the job ------------------------------------------------------------------------
def setup(args: argparse.Namespace) -> Tuple[DistContext, torch.device]:
    """This process's place in the job (from torchrun's environment), its device, and
    the process group (gloo on CPU, NCCL on GPUs) when there are peers."""
    torch.manual_seed(args.seed)
    ctx = DistContext.from_env(rpc_timeout=args.rpc_timeout)
    device = torch.device("cpu")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("error: --device cuda but CUDA is not available")
        device = torch.device("cuda", ctx.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if ctx.is_distributed:  # collectives time out after --rpc-timeout, naming a lost rank
        init_process_group("nccl" if device.type == "cuda" else "gloo", ctx)
    return ctx, device


def finish(ctx: DistContext, loaders: List[Any], results: dict) -> None:
    """Closes the loaders, leaves RPC and the process group, and prints the results as
    ONE JSON line (rank 0; NaN becomes null)."""
    for loader in loaders:
        loader.close()
    shutdown_rpc()
    if dist.is_initialized():
        dist.destroy_process_group()
    if ctx.rank == 0:
        line = json.dumps({k: (None if v != v else round(v, 4)) if isinstance(v, float) else v
                           for k, v in results.items()})
        print(line + "\n", end="", flush=True)  # one write: other ranks share this pipe


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    ctx, device = setup(args)

    # data: this rank's partition
    meta = json.loads((Path(args.partition_dir) / "META.json").read_text())
    pid = ctx.partition_id(meta["num_parts"])
    data = (LocalFeatureStore.from_partition(args.partition_dir, pid, mmap=not args.no_mmap),
            LocalGraphStore.from_partition(args.partition_dir, pid, mmap=not args.no_mmap))
    node_type = data[1].meta.node_types[0]
    y = data[0].get_tensor(node_type, "y")
    classes = int(all_reduce([float(y.max()) if y.numel() else -1.0], device,
                             dist.ReduceOp.MAX)[0]) + 1

    # model
    model = GraphSAGE(data[0].get_tensor_size(node_type, "x")[1], args.hidden,
                      num_layers=len(args.num_neighbors), out_channels=classes,
                      dropout=args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loaders = make_loaders(args, ctx, data, device)  # after the model: same init
    log(ctx, f"world_size={ctx.world_size} partitions={meta['num_parts']} classes={classes} "
             f"train batches/epoch={len(loaders[0])} device={device}")

    # training, with evaluation after every epoch
    trainer = Trainer(args, ctx, ddp, optimizer, loaders)
    if args.checkpoint_dir:
        trainer.resume()
    val_acc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, loaders[1], device), "val acc")
    test_acc = None if args.skip_eval else evaluate(model, loaders[2], device)
    if test_acc is not None:
        log(ctx, f"test acc {test_acc:.4f}")
    results = {"test_acc": test_acc, "val_acc": val_acc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": meta["num_parts"]}
    if args.feature_cache is not None:
        stats = loaders[0].cache_stats
        log(ctx, f"feature cache: hit rate {stats.hit_rate:.3f}, saved "
                 f"{stats.bytes_saved / 1e6:.1f} MB")
        results["cache_hit_rate"] = stats.hit_rate
    if args.layerwise_eval or args.export:
        results.update(infer_all(args, ctx, model, data, device))

    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    finish(ctx, loaders, results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
