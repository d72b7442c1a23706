"""Distributed heterogeneous node classification: a HeteroConv of SAGEConv layers in
DistributedDataParallel, classifying ``paper`` nodes of a papers/authors/institutions
graph.

    torchrun --nproc-per-node=2 benchmarks/trainers/hetero_node_classification.py \\
        --partition-dir parts/hetero --epochs 5

The short version a user copies is ``examples/hetero_node_classification.py``.
Seeds are ``("paper", ids)``; batches are ``HeteroData`` with ``x_dict`` and
``edge_index_dict``, as from PyG's ``NeighborLoader``. Layer ``l`` only holds
convolutions whose output is used later (edge types into ``paper`` in the last layer,
into the source types of those in the layer before, ...), so DDP never sees an unused
parameter. Training, evaluation (exact, over every rank), checkpoints and the final JSON
line work as in ``node_classification.py`` here. After training, ``--layerwise-eval`` computes
test accuracy from exact layer-wise inference over every node (``pyg_dist.infer`` with
the model's ``layerwise_spec()``) and ``--export DIR`` writes every ``--target`` node's
output, in the dataset's node ids.
"""
from __future__ import annotations

import argparse
import time
import warnings
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import HeteroConv, SAGEConv

from pyg_dist import loop
from pyg_dist.inference import LayerwiseSpec

from trainer import (Trainer, accuracy, count_classes, infer_all, node_loaders,
                     open_partition, parser)

EdgeType = Tuple[str, str, str]


def parse_args() -> argparse.Namespace:
    p = parser("Heterogeneous GraphSAGE (HeteroConv) node classification with pyg_dist",
               epochs=5, hidden=64)
    p.add_argument("--target", default="paper", help="node type to classify")
    p.add_argument("--layerwise-eval", action="store_true",
                   help="after training, test accuracy from exact layer-wise inference")
    p.add_argument("--export", metavar="DIR", default=None,
                   help="after training, write every target node's output to DIR")
    return p.parse_args()


# ---- model --------------------------------------------------------------------------
def layer_edge_types(edge_types: Sequence[EdgeType], target: str, num_layers: int
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
        hidden, out_channels, num_layers, dropout: as in PyG's ``GraphSAGE``.
    """

    def __init__(self, in_channels: Dict[str, int], edge_types: Sequence[EdgeType],
                 target: str, hidden: int, out_channels: int, num_layers: int,
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

    def forward(self, x: Dict[str, Tensor], edge_index: Dict[EdgeType, Tensor]) -> Tensor:
        for conv in self.convs:
            out = conv(x, edge_index)
            out = {t: F.dropout(F.relu(h), self.dropout, self.training) for t, h in out.items()}
            x = {**x, **out}
        return self.classify(x[self.target])

    def layerwise_spec(self) -> LayerwiseSpec:
        """How ``pyg_dist.infer`` runs this model one layer at a time (eval mode): each
        layer's outputs go through ReLU, and the last layer's target rows through the
        classifier (types a layer does not update keep their rows, as in ``forward``)."""
        last = len(self.convs) - 1

        def after(i: int, x: Dict[str, Tensor]) -> Dict[str, Tensor]:
            x = {t: F.relu(h) for t, h in x.items()}
            if i < last:
                return x
            return {self.target: self.classify(x[self.target])} if self.target in x else {}
        return LayerwiseSpec(list(self.convs), after=after)


# ---- training and evaluation --------------------------------------------------------
def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, target: str, batch: Any
         ) -> Tuple[float, int, int]:
    """One optimisation step: (loss, correct, seeds)."""
    optimizer.zero_grad()
    n = batch[target].batch_size
    out = model(batch.x_dict, batch.edge_index_dict)[:n]
    y = batch[target].y[:n]
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    return loss.item(), int((out.argmax(-1) == y).sum()), n


def evaluate(model: torch.nn.Module, loader: Any, target: str, device: torch.device) -> float:
    """Exact accuracy over every rank's ``target`` seeds."""
    return accuracy(model, loader, device, lambda b: (
        model(b.x_dict, b.edge_index_dict)[:b[target].batch_size],
        b[target].y[:b[target].batch_size]))


# ---- the job ------------------------------------------------------------------------
def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    ctx, device = loop.setup(args.device, args.seed, args.rpc_timeout)
    graph_meta, data = open_partition(args, ctx)
    if args.target not in graph_meta.node_types:
        raise SystemExit(f"error: --target {args.target!r} is not a node type of the graph "
                         f"({', '.join(graph_meta.node_types)})")
    classes = count_classes(data[0].get_tensor(args.target, "y"), device)

    # model
    in_channels = {t: data[0].get_tensor_size(t, "x")[1] for t in graph_meta.node_types}
    model = HeteroSAGE(in_channels, graph_meta.edge_types, args.target, args.hidden, classes,
                       len(args.num_neighbors), args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loaders = node_loaders(args, ctx, data, device, args.target)  # after the model
    loop.log(ctx, f"world_size={ctx.world_size} partitions={graph_meta.num_parts} node types="
             f"{list(graph_meta.node_types)} classes={classes} train batches/epoch="
             f"{len(loaders[0])}")

    # training, with evaluation after every epoch
    trainer = Trainer(args, ctx, {"model": ddp, "optimizer": optimizer}, loaders,
                      lambda batch: step(ddp, optimizer, args.target, batch),
                      ("seeds", lambda b: b[args.target].batch_size))
    if args.checkpoint_dir:
        trainer.resume()
    val_acc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, loaders[1], args.target, device),
        "val acc")
    test_acc = None if args.skip_eval else evaluate(model, loaders[2], args.target, device)
    if test_acc is not None:
        loop.log(ctx, f"test acc {test_acc:.4f}")
    results = {"test_acc": test_acc, "val_acc": val_acc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": graph_meta.num_parts}

    if args.layerwise_eval or args.export:
        results.update(infer_all(args, ctx, model, data, device, args.target))

    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    loop.finish(ctx, loaders, results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
