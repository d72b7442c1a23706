"""Node classification: GraphSAGE in DistributedDataParallel on a partitioned graph.

    pyg-dist-partition --dataset Cora --root data/planetoid --num-parts 2 --out parts/cora
    torchrun --nproc-per-node=2 examples/node_classification.py --partition-dir parts/cora

Each rank loads one partition, trains on its share of the ``train`` nodes and evaluates
its share of ``val``/``test``; accuracies are summed over every rank, so they are exact.
``--checkpoint-dir`` saves after every epoch and resumes from the newest checkpoint on
start (e.g. after ``torchrun --max-restarts=1`` restarted the job); ``inference.py``
exports the trained model's output for every node from it. Rank 0 prints
progress, a line per epoch and, last, one JSON line of results.
"""
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist import DistNeighborLoader, loop, node_split

parser = loop.parser(__doc__.split("\n\n")[0], epochs=20, batch_size=32)
parser.add_argument("--hidden", type=int, default=64)


def train(model, loader, optimizer, epoch, ctx):
    model.train()
    total_loss = total = 0
    for batch in pyg_dist.track(loader, f"epoch {epoch}", enabled=ctx.rank == 0, unit="batches",
                                count=("seeds", lambda b: b.batch_size)):
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * batch.batch_size
        total += batch.batch_size
    total_loss, total = loop.reduce([total_loss, total], loader.device)
    return total_loss / max(total, 1)


@torch.no_grad()
def test(model, loader):
    model.eval()
    correct = total = 0
    for batch in loader:  # each of this rank's seeds once
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    correct, total = loop.reduce([correct, total], loader.device)
    return correct / max(total, 1)


def main():
    args = parser.parse_args()
    ctx, device = loop.setup(args.device, seed=args.seed)

    # Data: this rank's partition; a loader over this rank's share of each split.
    data = loop.load_partition(args.partition_dir, ctx)
    train_loader = DistNeighborLoader(  # as many batches on every rank (DDP steps together)
        data, num_neighbors=args.num_neighbors, input_nodes=node_split(data, "train", ctx),
        batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
        device=device, seed=args.seed, current_ctx=ctx)
    val_loader, test_loader = (DistNeighborLoader(  # every seed once, every neighbour
        data, num_neighbors=[-1] * len(args.num_neighbors), batch_size=args.batch_size,
        input_nodes=node_split(data, split, ctx), even_batches=False, device=device,
        current_ctx=ctx)
        for split in ("val", "test"))

    # Model: the same initial weights on every rank (seeded), gradients averaged by DDP.
    num_features = data[0].get_tensor_size(None, "x")[1]
    num_classes = int(loop.reduce([data[0].get_tensor(None, "y").max()], op="max")[0]) + 1
    model = GraphSAGE(num_features, args.hidden, num_layers=len(args.num_neighbors),
                      out_channels=num_classes, dropout=0.5).to(device)
    ddp = DistributedDataParallel(model) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=5e-4)

    # Training: resumes from --checkpoint-dir, saves there after every epoch.
    epochs = loop.Epochs(args.epochs, train_loader, ctx, checkpoint_dir=args.checkpoint_dir,
                         state={"model": ddp, "optimizer": optimizer, "train": train_loader})
    for epoch in epochs:
        loss = train(ddp, train_loader, optimizer, epoch, ctx)
        epochs.log(loss=loss, val_acc=test(model, val_loader))
    test_acc = test(model, test_loader)
    loop.log(ctx, f"test acc {test_acc:.4f}")

    del ddp  # DDP must not outlive the process group (see loop.finish)
    loop.finish(ctx, [train_loader, val_loader, test_loader],
                {"test_acc": test_acc, **epochs.results()})


if __name__ == "__main__":  # sampler workers import this file again
    main()
