"""Distributed node classification: GraphSAGE in DistributedDataParallel over a
partitioned graph.

    python scripts/partition_graph.py --dataset Cora --root data/planetoid --num-parts 2 \\
        --out parts/cora
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29511 \\
        examples/node_classification.py --partition-dir parts/cora --epochs 20

Each rank loads partition ``rank // (world_size // num_parts)``, trains on its share
of the ``train`` split (``node_split``) and evaluates its share of ``val``/``test``.
Rank 0 prints one progress line per epoch and, last, ONE JSON line of results.

Evaluation uses ``even_batches=False``: the unwrapped model runs no collective per
batch, so ranks may run different numbers of eval batches (a rank that finishes early
still serves its partition to the others over RPC). Each rank sees each of its seeds
exactly once and the correct/total counts are summed by one ``all_reduce`` after the
loop, so accuracies are exact. Training keeps the default ``even_batches=True``:
DDP all-reduces gradients every batch, so every rank must run the same number.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Tuple

import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE

import _common as C
from pyg_dist import DistNeighborLoader, node_split


def build_parser() -> argparse.ArgumentParser:
    p = C.base_parser("GraphSAGE node classification with pyg_dist", epochs=10,
                      batch_size=256, lr=0.005, hidden=128)
    p.add_argument("--concurrency", type=int, default=2, help="batches in flight per sampler")
    p.add_argument("--normalize-features", action="store_true",
                   help="row-normalise x (like PyG's NormalizeFeatures; good for Planetoid)")
    return p


def make_loader(job: C.Job, args: argparse.Namespace, split: str, train: bool
                ) -> DistNeighborLoader:
    """Loader over this rank's share of ``split`` (train: shuffled, padded to even)."""
    ids = node_split(job.data, split, job.ctx)
    fanout = args.num_neighbors if train else (args.eval_neighbors or args.num_neighbors)
    return DistNeighborLoader(data=job.data, num_neighbors=fanout, input_nodes=ids,
                              batch_size=args.batch_size, shuffle=train,
                              num_workers=args.num_workers if train else 0,
                              concurrency=args.concurrency, device=job.device,
                              even_batches=train, seed=args.seed + (0 if train else 1),
                              transform=C.normalize_rows if args.normalize_features else None,
                              current_ctx=job.ctx)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer
               ) -> C.Step:
    def step(batch: Any) -> Tuple[float, float, float]:
        n = batch.batch_size
        optimizer.zero_grad(set_to_none=True)
        out = model(batch.x, batch.edge_index)[:n]
        loss = F.cross_entropy(out, batch.y[:n])
        loss.backward()
        optimizer.step()
        correct = int((out.argmax(-1) == batch.y[:n]).sum())
        return float(loss.detach()) * n, correct, n
    return step


@torch.no_grad()
def evaluate(job: C.Job, model: torch.nn.Module, loader: DistNeighborLoader) -> float:
    """Exact accuracy over every rank's seeds (one all-reduce at the end)."""
    model.eval()
    correct = total = 0
    for batch in loader:
        n = batch.batch_size
        pred = model(batch.x, batch.edge_index)[:n].argmax(-1)
        correct += int((pred == batch.y[:n]).sum())
        total += n
    model.train()
    correct, total = C.all_sum(job, [correct, total])
    return correct / max(total, 1)


def main() -> None:
    args = build_parser().parse_args()
    job = C.setup(args)
    classes = C.num_classes(job)
    model = GraphSAGE(C.feat_dim(job), args.hidden, num_layers=len(args.num_neighbors),
                      out_channels=classes, dropout=args.dropout)
    ddp = C.wrap_ddp(model, job)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    train = make_loader(job, args, "train", train=True)
    loaders = [train]
    if not args.skip_eval:
        loaders += [make_loader(job, args, "val", False), make_loader(job, args, "test", False)]
    C.log(job, f"world_size={job.ctx.world_size} partitions={job.meta.num_parts} "
               f"classes={classes} train batches/epoch={len(train)} device={job.device}")
    history, val_acc = [], float("nan")
    step = train_step(ddp, optimizer)
    for epoch in range(1, args.epochs + 1):
        stats = C.run_epoch(job, train, step)
        history.append(stats)
        start = time.perf_counter()
        if not args.skip_eval:
            val_acc = evaluate(job, model, loaders[1])
        C.log(job, f"epoch {epoch:3d} | loss {stats.loss:.4f} | train acc {stats.acc:.4f} | "
                   f"val acc {val_acc:.4f} | epoch {stats.seconds:.2f}s "
                   f"({stats.batches_per_s:.1f} batches/s, waiting on loader "
                   f"{100 * stats.wait_frac:.0f}%) | eval {time.perf_counter() - start:.2f}s")
    test_acc = float("nan") if args.skip_eval else evaluate(job, model, loaders[2])
    C.log(job, f"test acc {test_acc:.4f}")
    results = {"test_acc": round(test_acc, 4), "val_acc": round(val_acc, 4),
               **C.summarize(job, history)}
    C.finish(job, loaders)
    C.emit(job, results, args)


if __name__ == "__main__":
    C.run(main)
