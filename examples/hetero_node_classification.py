"""Distributed heterogeneous node classification: a HeteroConv of SAGEConv layers in
DistributedDataParallel, classifying ``paper`` nodes of a papers/authors/institutions
graph.

    python scripts/partition_graph.py --dataset synthetic --hetero --num-nodes 20000 \\
        --avg-degree 10 --feat-dim 32 --num-classes 4 --num-parts 2 --out parts/hetero
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29513 \\
        examples/hetero_node_classification.py --partition-dir parts/hetero --epochs 5

Layer ``l`` only holds convolutions whose output is used later (edge types into
``paper`` in the last layer, into the source types of those in the layer before, ...),
so DDP never sees an unused parameter. Evaluation is exact, as in
``node_classification.py`` (``even_batches=False``, one all-reduce of the counts).
"""
from __future__ import annotations

import argparse
import warnings
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import HeteroConv, SAGEConv

import _common as C
from pyg_dist import DistNeighborLoader, node_split
from pyg_dist.typing import EdgeType, NodeType


def build_parser() -> argparse.ArgumentParser:
    p = C.base_parser("Heterogeneous GraphSAGE (HeteroConv) node classification with pyg_dist",
                      epochs=5, batch_size=256, lr=0.005, hidden=64)
    p.add_argument("--target", default="paper", help="node type to classify")
    return p


def layer_edge_types(edge_types: Sequence[EdgeType], target: NodeType, num_layers: int
                     ) -> List[List[EdgeType]]:
    """Edge types per layer (first to last) whose messages can reach ``target``."""
    layers: List[List[EdgeType]] = []
    needed = {target}
    for _ in range(num_layers):
        layer = [et for et in edge_types if et[2] in needed]
        layers.append(layer)
        needed = {et[0] for et in layer} | needed
    return layers[::-1]


class HeteroSAGE(torch.nn.Module):
    """``num_layers`` HeteroConv(SAGEConv) layers and a linear classifier of ``target``.

    Args:
        in_channels: feature width per node type.
        edge_types: the graph's edge types.
        target: the node type to classify.
    """

    def __init__(self, in_channels: Dict[NodeType, int], edge_types: Sequence[EdgeType],
                 target: NodeType, hidden: int, out_channels: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        self.target, self.dropout = target, dropout
        self.convs = torch.nn.ModuleList()
        width = dict(in_channels)
        for layer in layer_edge_types(edge_types, target, num_layers):
            convs = {et: SAGEConv((width[et[0]], width[et[2]]), hidden) for et in layer}
            with warnings.catch_warnings():  # by design, later layers update fewer types
                warnings.filterwarnings("ignore", message=".*do not get updated.*")
                self.convs.append(HeteroConv(convs, aggr="sum"))
            width = {**width, **{et[2]: hidden for et in layer}}
        self.classify = torch.nn.Linear(hidden, out_channels)

    def forward(self, x: Dict[NodeType, Tensor], edge_index: Dict[EdgeType, Tensor]) -> Tensor:
        for conv in self.convs:
            out = conv(x, edge_index)
            out = {t: F.dropout(F.relu(h), self.dropout, self.training) for t, h in out.items()}
            x = {**x, **out}
        return self.classify(x[self.target])


def make_loader(job: C.Job, args: argparse.Namespace, split: str, train: bool
                ) -> DistNeighborLoader:
    ids = node_split(job.data, split, job.ctx, node_type=args.target)
    fanout = args.num_neighbors if train else (args.eval_neighbors or args.num_neighbors)
    return DistNeighborLoader(data=job.data, num_neighbors=fanout,
                              input_nodes=(args.target, ids), batch_size=args.batch_size,
                              shuffle=train, num_workers=args.num_workers if train else 0,
                              device=job.device, even_batches=train,
                              seed=args.seed + (0 if train else 1), current_ctx=job.ctx)


def _inputs(batch: Any, target: NodeType) -> Tuple[Dict, Dict, Tensor, int]:
    n = batch[target].batch_size
    return batch.x_dict, batch.edge_index_dict, batch[target].y[:n], n


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               target: NodeType) -> C.Step:
    def step(batch: Any) -> Tuple[float, float, float]:
        x, edge_index, y, n = _inputs(batch, target)
        optimizer.zero_grad(set_to_none=True)
        out = model(x, edge_index)[:n]
        loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        return float(loss.detach()) * n, int((out.argmax(-1) == y).sum()), n
    return step


@torch.no_grad()
def evaluate(job: C.Job, model: torch.nn.Module, loader: DistNeighborLoader,
             target: NodeType) -> float:
    model.eval()
    correct = total = 0
    for batch in loader:
        x, edge_index, y, n = _inputs(batch, target)
        correct += int((model(x, edge_index)[:n].argmax(-1) == y).sum())
        total += n
    model.train()
    correct, total = C.all_sum(job, [correct, total])
    return correct / max(total, 1)


def main() -> None:
    args = build_parser().parse_args()
    job = C.setup(args)
    meta = job.meta
    classes = C.num_classes(job, args.target)
    in_channels = {t: C.feat_dim(job, t) for t in meta.node_types}
    model = HeteroSAGE(in_channels, meta.edge_types, args.target, args.hidden, classes,
                       len(args.num_neighbors), args.dropout)
    ddp = C.wrap_ddp(model, job)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loaders = [make_loader(job, args, "train", True)]
    if not args.skip_eval:
        loaders += [make_loader(job, args, s, False) for s in ("val", "test")]
    C.log(job, f"world_size={job.ctx.world_size} partitions={meta.num_parts} node types="
               f"{list(meta.node_types)} classes={classes} train batches/epoch={len(loaders[0])}")
    history, val_acc = [], float("nan")
    step = train_step(ddp, optimizer, args.target)
    for epoch in range(1, args.epochs + 1):
        stats = C.run_epoch(job, loaders[0], step)
        history.append(stats)
        if not args.skip_eval:
            val_acc = evaluate(job, model, loaders[1], args.target)
        C.log(job, f"epoch {epoch:3d} | loss {stats.loss:.4f} | train acc {stats.acc:.4f} | "
                   f"val acc {val_acc:.4f} | epoch {stats.seconds:.2f}s "
                   f"({stats.batches_per_s:.1f} batches/s, waiting on loader "
                   f"{100 * stats.wait_frac:.0f}%)")
    test_acc = float("nan") if args.skip_eval else evaluate(job, model, loaders[2], args.target)
    C.log(job, f"test acc {test_acc:.4f}")
    results = {"test_acc": round(test_acc, 4), "val_acc": round(val_acc, 4),
               **C.summarize(job, history)}
    C.finish(job, loaders)
    C.emit(job, results, args)


if __name__ == "__main__":
    C.run(main)
