"""Heterogeneous node classification: HeteroConv(SAGEConv) layers in
DistributedDataParallel, classifying the ``paper`` nodes of a papers/authors/institutions
graph.

    pyg-dist-partition --dataset synthetic --hetero --num-nodes 20000 --avg-degree 10 \\
        --feat-dim 32 --num-classes 4 --num-parts 2 --out parts/hetero
    torchrun --nproc-per-node=2 examples/hetero_node_classification.py \\
        --partition-dir parts/hetero

Seeds are ``(node type, ids)``; batches are ``HeteroData`` with ``x_dict`` and
``edge_index_dict``, as from PyG's ``NeighborLoader``. Accuracies are exact (summed over
every rank). Rank 0 prints one JSON line of results last.
"""
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import HeteroConv, SAGEConv

import pyg_dist
from pyg_dist import DistNeighborLoader, loop, node_split

parser = loop.parser(__doc__.split("\n\n")[0], epochs=5, lr=0.005)
parser.add_argument("--target", default="paper", help="the node type to classify")
parser.add_argument("--hidden", type=int, default=64)


class HeteroSAGE(torch.nn.Module):
    """``num_layers`` HeteroConv(SAGEConv) layers over every edge type, then a linear
    classifier of the ``target`` nodes."""

    def __init__(self, in_channels, edge_types, hidden, out_channels, num_layers, target):
        super().__init__()
        self.target = target
        self.convs = torch.nn.ModuleList()
        for i in range(num_layers):
            width = in_channels if i == 0 else {t: hidden for t in in_channels}
            self.convs.append(HeteroConv({
                et: SAGEConv((width[et[0]], width[et[2]]), hidden) for et in edge_types}))
        self.lin = torch.nn.Linear(hidden, out_channels)

    def forward(self, x_dict, edge_index_dict):
        for conv in self.convs:
            x_dict = {t: F.dropout(F.relu(h), 0.5, self.training)
                      for t, h in conv(x_dict, edge_index_dict).items()}
        return self.lin(x_dict[self.target])


def train(model, loader, optimizer, epoch, ctx, target):
    model.train()
    total_loss = total = 0
    for batch in pyg_dist.track(loader, f"epoch {epoch}", enabled=ctx.rank == 0,
                                unit="batches"):
        optimizer.zero_grad()
        n = batch[target].batch_size
        out = model(batch.x_dict, batch.edge_index_dict)[:n]
        loss = F.cross_entropy(out, batch[target].y[:n])
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * n
        total += n
    total_loss, total = loop.reduce([total_loss, total], loader.device)
    return total_loss / max(total, 1)


@torch.no_grad()
def test(model, loader, target):
    model.eval()
    correct = total = 0
    for batch in loader:  # each of this rank's seeds once
        n = batch[target].batch_size
        out = model(batch.x_dict, batch.edge_index_dict)[:n]
        correct += int((out.argmax(-1) == batch[target].y[:n]).sum())
        total += n
    correct, total = loop.reduce([correct, total], loader.device)
    return correct / max(total, 1)


def main():
    args = parser.parse_args()
    ctx, device = loop.setup(args.device, seed=args.seed)

    data = loop.load_partition(args.partition_dir, ctx)
    meta = data[1].meta  # node and edge types, counts: the whole graph's
    if args.target not in meta.node_types:
        parser.error(f"--target {args.target!r} is not a node type: {meta.node_types}")
    loaders = {split: DistNeighborLoader(
        data, num_neighbors=args.num_neighbors, batch_size=args.batch_size,
        input_nodes=(args.target, node_split(data, split, ctx, node_type=args.target)),
        shuffle=split == "train", even_batches=split == "train", device=device,
        num_workers=args.num_workers if split == "train" else 0, current_ctx=ctx)
        for split in ("train", "val", "test")}

    in_channels = {t: data[0].get_tensor_size(t, "x")[1] for t in meta.node_types}
    y = data[0].get_tensor(args.target, "y")
    num_classes = int(loop.reduce([y.max() if y.numel() else -1], op="max")[0]) + 1
    model = HeteroSAGE(in_channels, meta.edge_types, args.hidden, num_classes,
                       len(args.num_neighbors), args.target).to(device)
    # the last layer's convolutions into other node types do not reach the loss
    ddp = DistributedDataParallel(model, find_unused_parameters=True) \
        if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=5e-4)

    epochs = loop.Epochs(args.epochs, loaders["train"], ctx, checkpoint_dir=args.checkpoint_dir,
                         state={"model": ddp, "optimizer": optimizer, "train": loaders["train"]})
    for epoch in epochs:
        loss = train(ddp, loaders["train"], optimizer, epoch, ctx, args.target)
        val_acc = test(model, loaders["val"], args.target)
        epochs.log(loss=loss, val_acc=val_acc)
    test_acc = test(model, loaders["test"], args.target)
    loop.log(ctx, f"test acc {test_acc:.4f} ({args.target} nodes)")

    del ddp  # DDP must not outlive the process group (see loop.finish)
    loop.finish(ctx, loaders.values(), {"test_acc": test_acc, **epochs.results()})


if __name__ == "__main__":  # sampler workers import this file again
    main()
