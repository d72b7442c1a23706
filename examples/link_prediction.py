"""Link prediction: a GraphSAGE encoder and a dot-product decoder, trained with
``DistLinkNeighborLoader`` and binary negative sampling, scored by AUC on held-out edges.

    pyg-dist-partition --dataset Cora --root data/planetoid --num-parts 2 --out parts/cora
    torchrun --nproc-per-node=2 examples/link_prediction.py --partition-dir parts/cora

Each rank takes its share of the stored edges (``edge_split``). Held-out edges are picked
by a hash of the unordered node pair, so every rank agrees on them without talking and
both directions of an edge land in the same split; they are removed from every sampled
subgraph, so the model never sees them. Rank 0 prints one JSON line of results last.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist import DistLinkNeighborLoader, edge_split, loop

parser = loop.parser(__doc__.split("\n\n")[0], epochs=5, lr=0.005)
parser.add_argument("--hidden", type=int, default=64)


def split_of(src, dst, val=0.05, test=0.10):
    """0 (train), 1 (val) or 2 (test) per edge, from a hash of the unordered pair."""
    h = (torch.minimum(src, dst) * 0x9E3779B1 + torch.maximum(src, dst)) & 0x7FFFFFFF
    u = ((h * 0x2C1B3C6D) & 0x7FFFFFFF).double() / 2**31
    return (u < val + test).long() + (u < test).long()


def drop_held_out(batch):
    """Removes val/test edges from a sampled subgraph (message passing never sees them)."""
    keep = split_of(batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]) == 0
    batch.edge_index, batch.e_id = batch.edge_index[:, keep], batch.e_id[keep]
    return batch


class Net(torch.nn.Module):
    def __init__(self, in_channels, hidden, num_layers):
        super().__init__()
        self.encoder = GraphSAGE(in_channels, hidden, num_layers, dropout=0.5)

    def forward(self, x, edge_index, edge_label_index):
        h = self.encoder(x, edge_index)
        return (h[edge_label_index[0]] * h[edge_label_index[1]]).sum(-1)


def train(model, loader, optimizer, epoch, ctx):
    model.train()
    total_loss = total = 0
    for batch in pyg_dist.track(loader, f"epoch {epoch}", enabled=ctx.rank == 0,
                                unit="batches"):
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index, batch.edge_label_index)
        loss = F.binary_cross_entropy_with_logits(out, batch.edge_label.float())
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * out.numel()
        total += out.numel()
    total_loss, total = loop.reduce([total_loss, total], loader.device)
    return total_loss / max(total, 1)


def gather(values):
    """Every rank's ``values`` (any lengths), concatenated."""
    if not dist.is_initialized():
        return values
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, values.cpu())
    return torch.cat(parts)


@torch.no_grad()
def test(model, loader):
    """AUC over every rank's held-out edges and their sampled negatives (rank-sum)."""
    model.eval()
    scores, labels = [], []
    for batch in loader:
        scores.append(model(batch.x, batch.edge_index, batch.edge_label_index).cpu())
        labels.append(batch.edge_label.cpu())
    scores, labels = gather(torch.cat(scores)), gather(torch.cat(labels)) > 0
    ranks = scores.argsort().argsort().double() + 1
    num_pos, num_neg = int(labels.sum()), int((~labels).sum())
    return float((ranks[labels].sum() - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg))


def main():
    args = parser.parse_args()
    ctx, device = loop.setup(args.device, seed=args.seed)

    data = loop.load_partition(args.partition_dir, ctx)
    edges = edge_split(data, ctx)  # this rank's share of the stored edges (original ids)
    which = split_of(edges[0], edges[1])
    loaders = [DistLinkNeighborLoader(
        data, num_neighbors=args.num_neighbors, edge_label_index=edges[:, which == i],
        neg_sampling="binary", batch_size=args.batch_size, shuffle=i == 0,
        even_batches=i == 0, transform=drop_held_out, device=device, seed=args.seed + i,
        num_workers=args.num_workers if i == 0 else 0, current_ctx=ctx) for i in range(3)]

    num_features = data[0].get_tensor_size(None, "x")[1]
    model = Net(num_features, args.hidden, len(args.num_neighbors)).to(device)
    ddp = DistributedDataParallel(model) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)

    state = {"model": ddp, "optimizer": optimizer, "train": loaders[0]}
    epochs = loop.Epochs(args.epochs, loaders[0], ctx, state, args.checkpoint_dir)
    for epoch in epochs:
        epochs.log(loss=train(ddp, loaders[0], optimizer, epoch, ctx),
                   val_auc=test(model, loaders[1]))
    results = {"test_auc": test(model, loaders[2]), **epochs.results()}
    loop.log(ctx, f"test auc {results['test_auc']:.4f}")

    del ddp, state  # DDP must not outlive the process group (see loop.finish)
    loop.finish(ctx, loaders, results)


if __name__ == "__main__":  # sampler workers import this file again
    main()
