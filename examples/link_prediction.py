"""Distributed link prediction: GraphSAGE encoder + dot-product decoder, trained with
``DistLinkNeighborLoader`` and binary negative sampling, scored by AUC on held-out edges.

    python scripts/partition_graph.py --dataset Cora --root data/planetoid --num-parts 2 \\
        --out parts/cora
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29512 \\
        examples/link_prediction.py --partition-dir parts/cora --epochs 5

Held-out edges are chosen by a hash of the unordered pair of global node ids, so
every rank agrees on them without communication and both directions of an
undirected edge land in the same split. They are never supervision targets during
training and are removed from every sampled subgraph before message passing (train
and evaluation alike), so the model never sees them. AUC is computed exactly over
the scores of every rank (gathered once) with the rank-sum (Mann-Whitney) formula.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GraphSAGE

import _epochs as E
import _job as J
import _nodes as N
from pyg_dist import DistLinkNeighborLoader, edge_split

SPLITS = ("train", "val", "test")


def build_parser() -> argparse.ArgumentParser:
    p = J.base_parser("GraphSAGE link prediction with pyg_dist", epochs=5, batch_size=256,
                      lr=0.005, hidden=64)
    p.add_argument("--val-frac", type=float, default=0.05)
    p.add_argument("--test-frac", type=float, default=0.10)
    return p


# ---- held-out edges -----------------------------------------------------------------
def pair_bucket(src: Tensor, dst: Tensor) -> Tensor:
    """A value in [0, 1) per edge, a hash of the unordered pair (same for both directions)."""
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    h = (lo * 0x9E3779B1 + hi * 0x85EBCA77) & 0x7FFFFFFF
    h = (h ^ (h >> 15)) * 0x2C1B3C6D & 0x7FFFFFFF
    return (h ^ (h >> 12)).double() / 2**31


def split_of(src: Tensor, dst: Tensor, args: argparse.Namespace) -> Tensor:
    """0 (train), 1 (val) or 2 (test) for every edge (global ids)."""
    u = pair_bucket(src, dst)
    out = torch.zeros_like(src)
    out[u < args.val_frac + args.test_frac] = 1
    out[u < args.test_frac] = 2
    return out


def drop_held_out(batch: Any, args: argparse.Namespace) -> Any:
    """Batch transform: removes val/test edges from the sampled subgraph."""
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    keep = split_of(src, dst, args) == 0
    batch.edge_index = batch.edge_index[:, keep]
    batch.e_id = batch.e_id[keep]
    return batch


def make_loaders(job: J.Job, args: argparse.Namespace) -> Dict[str, DistLinkNeighborLoader]:
    """One loader per split over this rank's share of the stored edges."""
    edges = edge_split(job.data, job.ctx)
    which = split_of(edges[0], edges[1], args)
    loaders = {}
    for i, name in enumerate(SPLITS):
        if name != "train" and args.skip_eval:
            continue
        train = name == "train"
        fanout = args.num_neighbors if train else (args.eval_neighbors or args.num_neighbors)
        loaders[name] = DistLinkNeighborLoader(
            data=job.data, num_neighbors=fanout, edge_label_index=edges[:, which == i],
            neg_sampling="binary", batch_size=args.batch_size, shuffle=train,
            num_workers=args.num_workers if train else 0, device=job.device,
            even_batches=train, seed=args.seed + i, current_ctx=job.ctx,
            wire_dtype=args.wire_dtype, transform=lambda b: drop_held_out(b, args))
    return loaders


# ---- model --------------------------------------------------------------------------
class LinkModel(torch.nn.Module):
    """GraphSAGE node encoder; an edge's score is the dot product of its ends."""

    def __init__(self, in_channels: int, hidden: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.encoder = GraphSAGE(in_channels, hidden, num_layers=num_layers, dropout=dropout)

    def forward(self, x: Tensor, edge_index: Tensor, edge_label_index: Tensor) -> Tensor:
        h = self.encoder(x, edge_index)
        return (h[edge_label_index[0]] * h[edge_label_index[1]]).sum(-1)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> E.Step:
    def step(batch: Any) -> Tuple[float, float, float]:
        optimizer.zero_grad(set_to_none=True)
        logits = model(batch.x, batch.edge_index, batch.edge_label_index)
        label = batch.edge_label.float()
        loss = F.binary_cross_entropy_with_logits(logits, label)
        loss.backward()
        optimizer.step()
        n = label.numel()
        correct = int(((logits > 0).float() == label).sum())
        return float(loss.detach()) * n, correct, n
    return step


# ---- evaluation ---------------------------------------------------------------------
def auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve by the rank-sum formula (tied scores share their mean rank)."""
    pos = labels > 0
    num_pos, num_neg = int(pos.sum()), int((~pos).sum())
    if num_pos == 0 or num_neg == 0:
        return float("nan")
    sorted_scores, order = torch.sort(scores.double())
    _, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True,
                                                  return_counts=True)
    last = torch.cumsum(counts, 0).double()               # 1-based rank of each tie group's end
    mean_rank = last - (counts.double() - 1) / 2
    ranks = torch.empty_like(mean_rank[inverse])
    ranks[order] = mean_rank[inverse]
    return float((ranks[pos].sum() - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg))


@torch.no_grad()
def evaluate(job: J.Job, model: torch.nn.Module, loader: DistLinkNeighborLoader) -> float:
    """AUC over every rank's held-out positives and their sampled negatives."""
    model.eval()
    scores, labels = [], []
    for batch in loader:
        scores.append(model(batch.x, batch.edge_index, batch.edge_label_index).cpu())
        labels.append(batch.edge_label.cpu())
    model.train()
    scores_t = torch.cat(scores) if scores else torch.empty(0)
    labels_t = torch.cat(labels).float() if labels else torch.empty(0)
    return auc(J.gather_cat(job, scores_t).cpu(), J.gather_cat(job, labels_t).cpu())


def main() -> None:
    args = build_parser().parse_args()
    job = J.setup(args)
    model = LinkModel(N.feat_dim(job), args.hidden, len(args.num_neighbors), args.dropout)
    ddp = J.wrap_ddp(model, job)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    loaders = make_loaders(job, args)
    J.log(job, f"world_size={job.ctx.world_size} partitions={job.meta.num_parts} train "
               f"batches/epoch={len(loaders['train'])} device={job.device}")
    history, val_auc = [], float("nan")
    step = train_step(ddp, optimizer)
    ckpt = E.Checkpoints(job, args, ddp, [optimizer], loaders=list(loaders.values()))
    ckpt.resume()
    for epoch, stats in E.train_epochs(job, args, loaders["train"], step, ckpt):
        history.append(stats)
        if not args.skip_eval:
            val_auc = evaluate(job, model, loaders["val"])
        J.log(job, f"epoch {epoch:3d} | loss {stats.loss:.4f} | train acc {stats.acc:.4f} | "
                   f"val auc {val_auc:.4f} | epoch {stats.seconds:.2f}s "
                   f"({stats.batches_per_s:.1f} batches/s, waiting on loader "
                   f"{100 * stats.wait_frac:.0f}%)")
    test_auc = float("nan") if args.skip_eval else evaluate(job, model, loaders["test"])
    J.log(job, f"test auc {test_auc:.4f}")
    results = {"test_auc": round(test_auc, 4), "val_auc": round(val_auc, 4),
               **E.summarize(job, history)}
    J.finish(job, list(loaders.values()))
    J.emit(job, results, args)


if __name__ == "__main__":
    J.run(main)
