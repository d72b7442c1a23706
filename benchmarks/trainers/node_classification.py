"""Node classification with every flag the benchmarks and fault tests use: GraphSAGE in
DistributedDataParallel over a partitioned graph.

    torchrun --nproc-per-node=2 benchmarks/trainers/node_classification.py \\
        --partition-dir parts/cora --epochs 20

The short version a user copies is ``examples/node_classification.py``. Here, besides:
sampler workers (``--num-workers``, ``--concurrency``), a feature cache, bf16/fp16 on the
wire, unmapped partitions, checkpoints every ``--checkpoint-every`` batches (exact resume
within an epoch), exact layer-wise evaluation (``--layerwise-eval``) and ``--export DIR``
of every node's output. Training loaders pad every rank to the same number of batches
(DDP all-reduces every batch); evaluation runs the unwrapped model with each rank's
seeds once, and one ``all_reduce`` makes accuracies exact. Rank 0 prints progress, a
line per epoch and, last, ONE JSON line of results.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Tuple

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

from pyg_dist import loop

from trainer import (Trainer, accuracy, budget, count_classes, infer_all, node_loaders,
                     open_partition, parser)


def parse_args() -> argparse.Namespace:
    p = parser("GraphSAGE node classification with pyg_dist")
    p.add_argument("--concurrency", type=int, default=2, help="batches in flight per sampler")
    p.add_argument("--no-mmap", action="store_true",
                   help="read the partition into memory instead of mapping its files")
    p.add_argument("--feature-cache", type=budget, default=None,
                   help="cache the most referenced remote nodes' features for training: a "
                        "fraction of the halo nodes (0.1) or bytes (200MB)")
    p.add_argument("--wire-dtype", choices=["bf16", "fp16"], default=None,
                   help="peers send float32 features as bfloat16/float16 (half the bytes)")
    p.add_argument("--sampling-strategy", choices=["neighbor", "labor"], default="neighbor",
                   help="of the training loader: 'labor' draws the same neighbours for "
                        "seeds that share them (fewer nodes and bytes per batch)")
    p.add_argument("--normalize-features", action="store_true",
                   help="row-normalise x (like PyG's NormalizeFeatures; good for Planetoid)")
    p.add_argument("--layerwise-eval", action="store_true",
                   help="after training, test accuracy from exact layer-wise inference")
    p.add_argument("--export", metavar="DIR", default=None,
                   help="after training, write every node's output to DIR (dataset ids)")
    args = p.parse_args()
    if (args.layerwise_eval or args.export) and args.normalize_features:
        p.error("--layerwise-eval/--export read the stored features, which "
                "--normalize-features does not change: use one or the other")
    return args


def normalize_rows(batch: Any) -> Any:
    """Batch transform: ``x`` divided by its row sums (PyG's NormalizeFeatures)."""
    batch.x = batch.x / batch.x.sum(-1, keepdim=True).clamp_(min=1e-12)
    return batch


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any
         ) -> Tuple[float, int, int]:
    """One optimisation step: (loss, correct, seeds)."""
    optimizer.zero_grad()
    out = model(batch.x, batch.edge_index)[:batch.batch_size]
    y = batch.y[:batch.batch_size]
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    return loss.item(), int((out.argmax(-1) == y).sum()), y.numel()


def evaluate(model: torch.nn.Module, loader: Any, device: torch.device) -> float:
    """Exact accuracy over every rank's seeds."""
    return accuracy(model, loader, device, lambda b: (
        model(b.x, b.edge_index)[:b.batch_size], b.y[:b.batch_size]))


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    ctx, device = loop.setup(args.device, args.seed, args.rpc_timeout)
    meta, data = open_partition(args, ctx, mmap=not args.no_mmap)
    node_type = meta.node_types[0]
    classes = count_classes(data[0].get_tensor(node_type, "y"), device)

    model = GraphSAGE(data[0].get_tensor_size(node_type, "x")[1], args.hidden,
                      num_layers=len(args.num_neighbors), out_channels=classes,
                      dropout=args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loaders = node_loaders(  # after the model: same init
        args, ctx, data, device, concurrency=args.concurrency, wire_dtype=args.wire_dtype,
        transform=normalize_rows if args.normalize_features else None,
        train_options={"feature_cache": args.feature_cache,
                       "sampling_strategy": args.sampling_strategy})
    loop.log(ctx, f"world_size={ctx.world_size} partitions={meta.num_parts} classes={classes} "
                  f"train batches/epoch={len(loaders[0])} device={device}")

    trainer = Trainer(args, ctx, {"model": ddp, "optimizer": optimizer}, loaders,
                      lambda batch: step(ddp, optimizer, batch),
                      ("seeds", lambda b: b.batch_size))
    if args.checkpoint_dir:
        trainer.resume()
    val_acc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, loaders[1], device), "val acc")
    test_acc = None if args.skip_eval else evaluate(model, loaders[2], device)
    if test_acc is not None:
        loop.log(ctx, f"test acc {test_acc:.4f}")
    results = {"test_acc": test_acc, "val_acc": val_acc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": meta.num_parts}
    if args.feature_cache is not None:
        stats = loaders[0].cache_stats
        loop.log(ctx, f"feature cache: hit rate {stats.hit_rate:.3f}, saved "
                      f"{stats.bytes_saved / 1e6:.1f} MB")
        results["cache_hit_rate"] = stats.hit_rate
    if args.layerwise_eval or args.export:
        results.update(infer_all(args, ctx, model, data, device))
    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    loop.finish(ctx, loaders, results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
