"""What the full-featured trainers in this folder share: their common flags and the
training loop with step-exact checkpoints.

These trainers are the applications benchmarks and fault tests run (every flag a
measurement or a fault needs: sampler workers, feature cache, wire dtype, checkpoints
every N steps, layer-wise evaluation, export). The examples a user copies are the short
files in ``examples/``. Each trainer is run as a script; its folder is ``sys.path[0]``,
so ``import trainer`` finds this module.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch

import pyg_dist
from pyg_dist import (DistNeighborLoader, LocalFeatureStore, LocalGraphStore, PartitionMeta,
                      checkpoint, loop, node_split, read_meta)
from pyg_dist.inference import export

#: ``step(batch) -> (loss, correct, count)``: one optimisation step on one batch
Step = Callable[[Any], Tuple[float, int, int]]


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


def parser(description: str, **defaults: Any) -> argparse.ArgumentParser:
    """The flags every trainer takes (:func:`pyg_dist.loop.parser`'s and more);
    ``defaults`` override their default values."""
    p = loop.parser(description, epochs=10, lr=0.005)
    p.add_argument("--eval-neighbors", type=loop.fanout, default=None,
                   help="fan-out per hop for val/test (default: --num-neighbors; -1: all)")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--rpc-timeout", type=float, default=60.0,
                   help="seconds before a silent peer is declared lost")
    p.add_argument("--skip-eval", action="store_true", help="train only")
    p.add_argument("--log-every", type=int, default=50,
                   help="progress within an epoch off a terminal: a line every N batches "
                        "(0: none)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="save every N training batches (0: at the end of every epoch)")
    p.set_defaults(**defaults)
    return p


def node_loaders(args: argparse.Namespace, ctx: Any, data: Tuple[Any, Any],
                 device: torch.device, node_type: Optional[str] = None,
                 train_options: Optional[Dict[str, Any]] = None, **options: Any
                 ) -> List[DistNeighborLoader]:
    """Training loader (shuffled, padded, ``--num-workers``, ``train_options``), then val
    and test loaders (in order, each seed once) unless ``--skip-eval``; seeds are
    ``node_type`` nodes (default: the only type); ``options`` go to every loader."""
    splits = ["train"] if args.skip_eval else ["train", "val", "test"]
    loaders = []
    for i, split in enumerate(splits):
        train = split == "train"
        seeds = node_split(data, split, ctx, node_type=node_type)
        loaders.append(DistNeighborLoader(
            data=data, input_nodes=seeds if node_type is None else (node_type, seeds),
            num_neighbors=args.num_neighbors if train else
            (args.eval_neighbors or args.num_neighbors),
            batch_size=args.batch_size, shuffle=train, even_batches=train,
            num_workers=args.num_workers if train else 0, device=device,
            seed=args.seed + i, current_ctx=ctx, **options,
            **((train_options or {}) if train else {})))
    return loaders


@torch.no_grad()
def accuracy(model: torch.nn.Module, loader: Any, device: torch.device,
             forward: Callable[[Any], Tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Exact accuracy over every rank's seeds; ``forward(batch)`` is ``(logits, labels)``
    of the batch's seeds."""
    model.eval()
    correct = total = 0
    for batch in loader:
        out, y = forward(batch)
        correct += int((out.argmax(-1) == y).sum())
        total += y.numel()
    correct, total = loop.reduce([correct, total], device)
    return correct / max(total, 1)


def infer_all(args: argparse.Namespace, ctx: Any, model: torch.nn.Module,
              data: Tuple[LocalFeatureStore, LocalGraphStore], device: torch.device,
              node_type: Optional[str] = None) -> dict:
    """Exact layer-wise inference over every node: test accuracy (``--layerwise-eval``)
    and/or an export (``--export``) of the ``node_type`` rows (default: the only type)."""
    out = pyg_dist.infer(model, data, device=device, ctx=ctx)
    rows = out if node_type is None else out[node_type]
    results: dict = {}
    if args.layerwise_eval:
        features = data[0]
        lo, hi = rows.local_range           # relabelled ids of the rows this rank computed
        test = features.split_ids("test", node_type)  # relabelled ids of its test nodes
        test = test[(test >= lo) & (test < hi)]
        pred = rows.local_data[test - lo].argmax(-1)
        y = features.gather(features.resolve(node_type, "y"), "y", test)
        correct, total = loop.reduce([float((pred == y).sum()), float(test.numel())], device)
        results["layerwise_test_acc"] = round(correct / max(total, 1.0), 4)
    if args.export:
        export(rows if node_type is None else {node_type: rows}, args.partition_dir,
               args.export, overwrite=True, ctx=ctx)
        results["export"] = args.export
    return results


def open_partition(args: argparse.Namespace, ctx: Any, mmap: bool = True
                   ) -> Tuple[PartitionMeta, Tuple[LocalFeatureStore, LocalGraphStore]]:
    """The partitioning's metadata and this rank's partition."""
    meta = read_meta(args.partition_dir)
    pid = ctx.partition_id(meta.num_parts)
    return meta, (LocalFeatureStore.from_partition(args.partition_dir, pid, mmap=mmap),
                  LocalGraphStore.from_partition(args.partition_dir, pid, mmap=mmap))


def count_classes(y: torch.Tensor, device: torch.device) -> int:
    """The number of classes: the largest label over every rank, plus one."""
    return int(loop.reduce([float(y.max()) if y.numel() else -1.0], device, "max")[0]) + 1


class Trainer:
    """The training loop's state: what a checkpoint holds, the step count, the loaders.

    Args:
        args: the parsed flags (``epochs``, ``checkpoint_dir``, ``checkpoint_every``,
            ``log_every``).
        ctx: this process's :class:`pyg_dist.DistContext`.
        state: what a checkpoint holds besides the loaders (model, optimizers, tables).
        loaders: the training loader first, then the evaluation loaders.
        step: one optimisation step on a batch: ``(loss, correct, count)``.
        count: the progress line's second rate, e.g. ``("seeds", fn)``.
    """

    def __init__(self, args: argparse.Namespace, ctx: Any, state: Dict[str, Any],
                 loaders: List[Any], step: Step, count: Tuple[str, Callable]) -> None:
        self.args, self.ctx, self.extra, self.loaders = args, ctx, state, loaders
        self.train_step, self.count = step, count
        self.step, self.resumed_from = 0, None
        self.device = loaders[0].device

    def state(self) -> dict:
        """What a checkpoint holds, by name."""
        return {**self.extra, **{f"loader{i}": l for i, l in enumerate(self.loaders)}}

    def resume(self) -> None:
        """Loads ``--checkpoint-dir``'s newest checkpoint, if there is one (collective)."""
        info = loop.resume(self.args.checkpoint_dir, self.state(), self.ctx)
        if info is not None:
            self.step = self.resumed_from = info.step

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
            loop.log(self.ctx, f"epoch {epoch:3d} | loss {loss:.4f} | train acc {acc:.4f} | "
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
        args = self.args
        for value in self.extra.values():
            if isinstance(value, torch.nn.Module):
                value.train()
        loss_sum = correct = count = batches = 0
        progress = pyg_dist.track(self.loaders[0], f"epoch {epoch} train", stream=sys.stdout,
                                  enabled=self.ctx.rank == 0 and args.log_every > 0,
                                  every=args.log_every, unit="batches", count=self.count)
        for batch in progress:
            loss, right, n = self.train_step(batch)
            loss_sum, correct, count = loss_sum + loss * n, correct + right, count + n
            self.step, batches = self.step + 1, batches + 1
            if args.checkpoint_dir and args.checkpoint_every and \
                    self.step % args.checkpoint_every == 0:
                self.save(epoch)
        if args.checkpoint_dir and not args.checkpoint_every:
            self.save(epoch)
        loss_sum, correct, count = loop.reduce([loss_sum, correct, count], self.device)
        return loss_sum / max(count, 1), correct / max(count, 1), batches
