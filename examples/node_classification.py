"""Distributed node classification: GraphSAGE in DistributedDataParallel over a
partitioned graph.

    python scripts/partition_graph.py --dataset Cora --root data/planetoid --num-parts 2 \\
        --out parts/cora
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29511 \\
        examples/node_classification.py --partition-dir parts/cora --epochs 20

Each rank loads partition ``rank // (world_size // num_parts)``, trains on its share
of the ``train`` split (``node_split``) and evaluates its share of ``val``/``test``.
Rank 0 prints one progress line per epoch and, last, ONE JSON line of results.

After training, ``--layerwise-eval`` also computes the test accuracy from exact layer-wise
inference over every node (``pyg_dist.infer``: each layer over every node's full
in-neighbourhood, no sampling), and ``--export DIR`` writes every node's final-layer output,
in the dataset's original node ids, to ``DIR`` (``pyg_dist.inference.export``; read it back
with ``pyg_dist.inference.read_export``).

Evaluation uses ``even_batches=False``: the unwrapped model runs no collective per
batch, so ranks may run different numbers of eval batches (a rank that finishes early
still serves its partition to the others over RPC). Each rank sees each of its seeds
exactly once and the correct/total counts are summed by one ``all_reduce`` after the
loop, so accuracies are exact. Training keeps the default ``even_batches=True``:
DDP all-reduces gradients every batch, so every rank must run the same number
(see ``_nodes.node_loaders``).
"""
from __future__ import annotations

import argparse
from typing import Any, Tuple

import torch
from torch import Tensor
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist.inference import export

import _epochs as E
import _job as J
import _nodes as N


def build_parser() -> argparse.ArgumentParser:
    p = J.base_parser("GraphSAGE node classification with pyg_dist", epochs=10,
                      batch_size=256, lr=0.005, hidden=128)
    p.add_argument("--concurrency", type=int, default=2, help="batches in flight per sampler")
    p.add_argument("--feature-cache", type=N.parse_budget, default=None,
                   help="cache the most referenced remote nodes' features for training: a "
                        "fraction of the halo nodes (0.1) or bytes (200MB)")
    p.add_argument("--normalize-features", action="store_true",
                   help="row-normalise x (like PyG's NormalizeFeatures; good for Planetoid)")
    p.add_argument("--layerwise-eval", action="store_true",
                   help="after training, test accuracy from exact layer-wise inference over "
                        "every node")
    p.add_argument("--export", metavar="DIR", default=None,
                   help="after training, write every node's final-layer output (exact "
                        "layer-wise inference) to DIR, in the dataset's node ids")
    return p


def infer_all(job: J.Job, args: argparse.Namespace, model: torch.nn.Module) -> dict:
    """Exact layer-wise inference over every node: test accuracy and/or an export."""
    out = pyg_dist.infer(model, job.data, device=job.device, ctx=job.ctx)
    results = {}
    if args.layerwise_eval:
        features = job.data[0]
        lo, hi = out.local_range             # relabelled ids of the rows this rank computed
        test = features.split_ids("test")    # relabelled ids of the partition's test nodes
        test = test[(test >= lo) & (test < hi)]
        pred = out.local_data[test - lo].argmax(-1)
        y = features.gather(features.resolve(None), "y", test)
        correct, total = J.all_sum(job, [float((pred == y).sum()), float(test.numel())])
        results["layerwise_test_acc"] = correct / max(total, 1.0)
    if args.export:
        export(out, args.partition_dir, args.export, overwrite=True, ctx=job.ctx)
        results["export"] = args.export
    return results


def predict(model: torch.nn.Module) -> N.Predict:
    def forward(batch: Any) -> Tuple[Tensor, Tensor]:
        n = batch.batch_size
        return model(batch.x, batch.edge_index)[:n], batch.y[:n]
    return forward


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if (args.layerwise_eval or args.export) and args.normalize_features:
        parser.error("--layerwise-eval/--export read the stored features, which "
                     "--normalize-features does not change: use one or the other")
    job = J.setup(args)
    classes = N.num_classes(job)
    model = GraphSAGE(N.feat_dim(job), args.hidden, num_layers=len(args.num_neighbors),
                      out_channels=classes, dropout=args.dropout)
    ddp = J.wrap_ddp(model, job)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loaders = N.node_loaders(job, args, *N.splits(args), concurrency=args.concurrency,
                             transform=N.normalize_rows if args.normalize_features else None,
                             train_options={"feature_cache": args.feature_cache})
    J.log(job, f"world_size={job.ctx.world_size} partitions={job.meta.num_parts} "
               f"classes={classes} train batches/epoch={len(loaders[0])} device={job.device}")
    ckpt = E.Checkpoints(job, args, ddp, [optimizer], loaders=loaders)
    ckpt.resume()
    results = E.fit(job, args, loaders, N.classify_step(predict(ddp), [optimizer]),
                    lambda loader: N.accuracy(job, model, loader, predict(model)), ckpt)
    results.update(N.cache_report(loaders[0]))
    if args.layerwise_eval or args.export:
        results.update(infer_all(job, args, model))
    J.finish(job, loaders)
    J.emit(job, results, args)


if __name__ == "__main__":
    J.run(main)
