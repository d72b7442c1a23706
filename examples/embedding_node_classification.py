"""Learnable node embeddings: a ``DistEmbedding`` row per node (sharded like the graph)
feeding GraphSAGE, trained without any input features.

    pyg-dist-partition --dataset Cora --root data/planetoid --num-parts 2 --out parts/cora
    torchrun --nproc-per-node=2 examples/embedding_node_classification.py \\
        --partition-dir parts/cora

Each batch's input is ``embedding(batch.n_id)``, the rows of its sampled nodes, read by
node id from the ranks that own them. ``Adam`` trains the GNN inside DDP; ``SparseAdam``
trains the rows a batch touched, sending each row's gradient to its owner (a collective:
every rank steps once per batch, which the evenly padded training loader guarantees).
``--checkpoint-dir`` saves all of it, rows and optimizer state included, after every epoch
and resumes from it on start, on any number of ranks. On Cora (2 ranks) test accuracy
is about 0.6: only the structure around the 140 labelled nodes informs the embeddings.
"""
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist import DistEmbedding, DistNeighborLoader, SparseAdam, init_rpc, loop, node_split

parser = loop.parser(__doc__.split("\n\n")[0], epochs=30, batch_size=64,
                     num_neighbors=[25, 10])
parser.add_argument("--embedding-dim", type=int, default=64)
parser.add_argument("--sparse-lr", type=float, default=0.05, help="SparseAdam (the rows)")
parser.add_argument("--hidden", type=int, default=64)


def train(model, emb, loader, optimizer, sparse, epoch, ctx):
    model.train()
    total_loss = total = 0
    for batch in pyg_dist.track(loader, f"epoch {epoch}", enabled=ctx.rank == 0,
                                unit="batches"):
        optimizer.zero_grad()
        sparse.zero_grad()
        x = emb(batch.n_id, device=loader.device)  # the sampled nodes' rows
        out = model(x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        sparse.step()  # a collective: each row's gradient goes to its owner
        total_loss += loss.item() * batch.batch_size
        total += batch.batch_size
    total_loss, total = loop.reduce([total_loss, total], loader.device)
    return total_loss / max(total, 1)


@torch.no_grad()
def test(model, emb, loader):
    model.eval()
    correct = total = 0
    for batch in loader:  # each of this rank's seeds once
        out = model(emb(batch.n_id, device=loader.device), batch.edge_index)
        correct += int((out[:batch.batch_size].argmax(-1) == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    correct, total = loop.reduce([correct, total], loader.device)
    return correct / max(total, 1)


def main():
    args = parser.parse_args()
    ctx, device = loop.setup(args.device, seed=args.seed)

    data = loop.load_partition(args.partition_dir, ctx)
    init_rpc(ctx, data)  # the table's rows travel over the RPC group the loaders use
    train_loader = DistNeighborLoader(data, num_neighbors=args.num_neighbors, shuffle=True,
                                      input_nodes=node_split(data, "train", ctx),
                                      batch_size=args.batch_size, device=device,
                                      seed=args.seed, current_ctx=ctx)
    eval_loaders = [DistNeighborLoader(data, num_neighbors=[-1] * len(args.num_neighbors),
                                       input_nodes=node_split(data, split, ctx),
                                       batch_size=args.batch_size, even_batches=False,
                                       device=device, current_ctx=ctx)
                    for split in ("val", "test")]

    # An embedding row per node, each rank holding the rows of the nodes it owns.
    meta = data[1].meta
    generator = torch.Generator().manual_seed(args.seed + ctx.rank)
    emb = DistEmbedding(meta.num_nodes[meta.node_types[0]], args.embedding_dim,
                        name="node_embedding", partition=meta,
                        init_func=lambda shape, dtype: 0.1 * torch.randn(
                            shape, dtype=dtype, generator=generator))
    y = data[0].get_tensor(None, "y")
    model = GraphSAGE(args.embedding_dim, args.hidden, len(args.num_neighbors), dropout=0.5,
                      out_channels=int(loop.reduce([y.max()], op="max")[0]) + 1).to(device)
    ddp = DistributedDataParallel(model) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=5e-4)
    sparse = SparseAdam([emb], lr=args.sparse_lr)

    # The checkpoint holds the table's rows and SparseAdam's state too.
    state = {"model": ddp, "optimizer": optimizer, "embedding": emb, "sparse": sparse,
             "train": train_loader}
    epochs = loop.Epochs(args.epochs, train_loader, ctx, state, args.checkpoint_dir)
    for epoch in epochs:
        loss = train(ddp, emb, train_loader, optimizer, sparse, epoch, ctx)
        epochs.log(loss=loss, val_acc=test(model, emb, eval_loaders[0]))
    results = {"test_acc": test(model, emb, eval_loaders[1]), **epochs.results()}

    del ddp, state  # DDP must not outlive the process group (see loop.finish)
    loop.finish(ctx, [train_loader, *eval_loaders], results)


if __name__ == "__main__":  # sampler workers import this file again
    main()
