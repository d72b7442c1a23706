"""Distributed link prediction: GraphSAGE encoder + dot-product decoder, trained with
``DistLinkNeighborLoader`` and binary negative sampling, scored by AUC on held-out edges.

    torchrun --nproc-per-node=2 benchmarks/trainers/link_prediction.py \\
        --partition-dir parts/cora --epochs 5

The short version a user copies is ``examples/link_prediction.py``.
Held-out edges are chosen by a hash of the unordered pair of node ids, so every rank
agrees on them without communication and both directions of an undirected edge land in
the same split. They are never supervision targets during training and are removed from
every sampled subgraph before message passing (train and evaluation alike), so the model
never sees them. AUC is exact: every rank's scores are gathered once and ranked
(Mann-Whitney). Checkpoints and the final JSON line work as in ``node_classification.py`` here.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Dict, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

from pyg_dist import DistContext, DistLinkNeighborLoader, edge_split, loop

from trainer import Trainer, open_partition, parser

SPLITS = ("train", "val", "test")


def parse_args() -> argparse.Namespace:
    p = parser("GraphSAGE link prediction with pyg_dist", epochs=5, hidden=64)
    p.add_argument("--val-frac", type=float, default=0.05)
    p.add_argument("--test-frac", type=float, default=0.10)
    return p.parse_args()


def gather_cat(values: Tensor) -> Tensor:
    """Every rank's 1-d ``values`` (any lengths) concatenated in rank order."""
    if not dist.is_initialized():
        return values
    n = torch.tensor([values.numel()], device=values.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    padded = torch.zeros(int(max(sizes).item()), dtype=values.dtype, device=values.device)
    padded[:values.numel()] = values
    out = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(out, padded)
    return torch.cat([o[:int(s.item())] for o, s in zip(out, sizes)])


# ---- data: held-out edges and loaders -----------------------------------------------
def split_of(src: Tensor, dst: Tensor, args: argparse.Namespace) -> Tensor:
    """0 (train), 1 (val) or 2 (test) per edge, from a hash of the unordered pair (the
    same for both directions and on every rank)."""
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    h = (lo * 0x9E3779B1 + hi * 0x85EBCA77) & 0x7FFFFFFF
    h = (h ^ (h >> 15)) * 0x2C1B3C6D & 0x7FFFFFFF
    u = (h ^ (h >> 12)).double() / 2**31
    out = torch.zeros_like(src)
    out[u < args.val_frac + args.test_frac] = 1
    out[u < args.test_frac] = 2
    return out


def drop_held_out(batch: Any, args: argparse.Namespace) -> Any:
    """Batch transform: removes val/test edges from the sampled subgraph."""
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    keep = split_of(src, dst, args) == 0
    batch.edge_index, batch.e_id = batch.edge_index[:, keep], batch.e_id[keep]
    return batch


def make_loaders(args: argparse.Namespace, ctx: DistContext, data: Tuple[Any, Any],
                 device: torch.device) -> Dict[str, DistLinkNeighborLoader]:
    """One loader per split over this rank's share of the stored edges (``edge_split``)."""
    edges = edge_split(data, ctx)
    which = split_of(edges[0], edges[1], args)
    loaders = {}
    for i, name in enumerate(SPLITS):
        if name != "train" and args.skip_eval:
            continue
        train = name == "train"
        loaders[name] = DistLinkNeighborLoader(
            data=data, edge_label_index=edges[:, which == i], neg_sampling="binary",
            num_neighbors=args.num_neighbors if train else
            (args.eval_neighbors or args.num_neighbors),
            batch_size=args.batch_size, shuffle=train, even_batches=train,
            num_workers=args.num_workers if train else 0, device=device,
            seed=args.seed + i, current_ctx=ctx, transform=lambda b: drop_held_out(b, args))
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


# ---- training and evaluation --------------------------------------------------------
def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any
         ) -> Tuple[float, int, int]:
    """One optimisation step: (loss, correct signs of the score, edges)."""
    optimizer.zero_grad()
    logits = model(batch.x, batch.edge_index, batch.edge_label_index)
    label = batch.edge_label.float()
    loss = F.binary_cross_entropy_with_logits(logits, label)
    loss.backward()
    optimizer.step()
    return loss.item(), int(((logits > 0).float() == label).sum()), label.numel()


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
def evaluate(model: torch.nn.Module, loader: DistLinkNeighborLoader,
             device: torch.device) -> float:
    """AUC over every rank's held-out positives and their sampled negatives."""
    model.eval()
    scores, labels = [torch.empty(0, device=device)], [torch.empty(0, device=device)]
    for batch in loader:
        scores.append(model(batch.x, batch.edge_index, batch.edge_label_index).float())
        labels.append(batch.edge_label.float())
    return auc(gather_cat(torch.cat(scores)).cpu(), gather_cat(torch.cat(labels)).cpu())


# ---- the job ------------------------------------------------------------------------
def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    ctx, device = loop.setup(args.device, args.seed, args.rpc_timeout)
    meta, data = open_partition(args, ctx)
    node_type = meta.node_types[0]
    model = LinkModel(data[0].get_tensor_size(node_type, "x")[1], args.hidden,
                      len(args.num_neighbors), args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    loaders = make_loaders(args, ctx, data, device)  # after the model: same init
    loop.log(ctx, f"world_size={ctx.world_size} partitions={meta.num_parts} train "
                  f"batches/epoch={len(loaders['train'])} device={device}")

    # training, with evaluation after every epoch
    trainer = Trainer(args, ctx, {"model": ddp, "optimizer": optimizer}, list(loaders.values()),
                      lambda batch: step(ddp, optimizer, batch),
                      ("edges", lambda b: b.input_id.numel()))
    if args.checkpoint_dir:
        trainer.resume()
    val_auc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, loaders["val"], device), "val auc")
    test_auc = None if args.skip_eval else evaluate(model, loaders["test"], device)
    if test_auc is not None:
        loop.log(ctx, f"test auc {test_auc:.4f}")
    results = {"test_auc": test_auc, "val_auc": val_auc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": meta.num_parts}

    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    loop.finish(ctx, list(loaders.values()), results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
