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

import _epochs as E
import _job as J
import _nodes as N
from pyg_dist.typing import EdgeType, NodeType


def build_parser() -> argparse.ArgumentParser:
    p = J.base_parser("Heterogeneous GraphSAGE (HeteroConv) node classification with pyg_dist",
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


def predict(model: torch.nn.Module, target: NodeType) -> N.Predict:
    def forward(batch: Any) -> Tuple[Tensor, Tensor]:
        n = batch[target].batch_size
        return model(batch.x_dict, batch.edge_index_dict)[:n], batch[target].y[:n]
    return forward


def main() -> None:
    args = build_parser().parse_args()
    job = J.setup(args)
    meta = job.meta
    classes = N.num_classes(job, args.target)
    in_channels = {t: N.feat_dim(job, t) for t in meta.node_types}
    model = HeteroSAGE(in_channels, meta.edge_types, args.target, args.hidden, classes,
                       len(args.num_neighbors), args.dropout)
    ddp = J.wrap_ddp(model, job)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loaders = N.node_loaders(job, args, *N.splits(args), node_type=args.target)
    J.log(job, f"world_size={job.ctx.world_size} partitions={meta.num_parts} node types="
               f"{list(meta.node_types)} classes={classes} train batches/epoch={len(loaders[0])}")
    ckpt = E.Checkpoints(job, args, ddp, [optimizer], loaders=loaders)
    ckpt.resume()
    results = E.fit(job, args, loaders, N.classify_step(predict(ddp, args.target), [optimizer]),
                    lambda loader: N.accuracy(job, model, loader, predict(model, args.target)),
                    ckpt)
    J.finish(job, loaders)
    J.emit(job, results, args)


if __name__ == "__main__":
    J.run(main)
