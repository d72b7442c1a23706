"""Node classification without input features: a learnable embedding per node
(:class:`pyg_dist.DistEmbedding`, sharded like the graph) feeding GraphSAGE.

    torchrun --nproc-per-node=2 benchmarks/trainers/embedding_node_classification.py \\
        --partition-dir parts/cora --epochs 30

The short version a user copies is ``examples/embedding_node_classification.py``.
The node features stored in the partitions are ignored: each batch's input is
``embedding(batch.n_id)``, the rows of its sampled nodes, read by node id from the ranks
that own them. The GNN's dense weights are trained by ``Adam`` inside
``DistributedDataParallel``; the embedding rows a batch touched are trained by
:class:`pyg_dist.SparseAdam`, whose ``step()`` sends every row's gradient to its owner
rank (a collective: every rank steps once per batch, which the evenly padded training
loader guarantees). ``--checkpoint-dir`` saves and resumes all of it (rows and SparseAdam
state included); ``--checkpoint DIR`` saves the table and its optimizer state at the end,
in one atomic checkpoint (loadable on any number of ranks with
:func:`pyg_dist.embedding.load_checkpoint`).

On Cora (2 partitions, 2 trainers, defaults) test accuracy is about 0.62-0.65: with 140
labelled nodes and no features, only the structure around them informs the embeddings
(chance is 0.14, the majority class 0.32).
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Tuple

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

from pyg_dist import DistEmbedding, SparseAdam, init_rpc, loop
from pyg_dist.embedding import save_checkpoint

from trainer import Trainer, accuracy, count_classes, node_loaders, open_partition, parser


def parse_args() -> argparse.Namespace:
    p = parser("Learnable node embeddings + GraphSAGE with pyg_dist", epochs=30, batch_size=64,
               num_neighbors=[25, 10], eval_neighbors=[-1, -1], lr=0.01, hidden=64)
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--sparse-lr", type=float, default=0.05, help="SparseAdam learning rate")
    p.add_argument("--checkpoint", default=None,
                   help="folder to save the embedding and its optimizer state to at the end")
    return p.parse_args()


# ---- training and evaluation --------------------------------------------------------
def step(model: torch.nn.Module, emb: DistEmbedding, optimizer: torch.optim.Optimizer,
         sparse: SparseAdam, batch: Any) -> Tuple[float, int, int]:
    """One optimisation step of the GNN (Adam) and the rows the batch read (SparseAdam)."""
    optimizer.zero_grad()
    sparse.zero_grad()
    x = emb(batch.n_id, device=batch.y.device)  # rows of the sampled nodes
    out = model(x, batch.edge_index)[:batch.batch_size]
    y = batch.y[:batch.batch_size]
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    sparse.step()  # a collective: each row's gradient goes to its owner
    return loss.item(), int((out.argmax(-1) == y).sum()), y.numel()


def evaluate(model: torch.nn.Module, emb: DistEmbedding, loader: Any,
             device: torch.device) -> float:
    """Exact accuracy over every rank's seeds."""
    return accuracy(model, loader, device, lambda b: (
        model(emb(b.n_id, device=device), b.edge_index)[:b.batch_size], b.y[:b.batch_size]))


# ---- the job ------------------------------------------------------------------------
def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    ctx, device = loop.setup(args.device, args.seed, args.rpc_timeout)
    meta, data = open_partition(args, ctx)
    # Join RPC serving this partition before creating the table: its rows are read and
    # updated over the same RPC group the loaders sample through.
    init_rpc(ctx, data)
    node_type = data[1].meta.node_types[0]
    classes = count_classes(data[0].get_tensor(node_type, "y"), device)

    # model: an embedding row per node (sharded like the graph) feeding GraphSAGE
    num_nodes = data[1].meta.num_nodes[node_type]
    generator = torch.Generator().manual_seed(args.seed + ctx.rank)
    emb = DistEmbedding(num_nodes, args.embedding_dim, name="node_embedding",
                        init_func=lambda shape, dtype: 0.1 * torch.randn(
                            shape, dtype=dtype, generator=generator),
                        partition=data[1].meta)
    model = GraphSAGE(args.embedding_dim, args.hidden,
                      num_layers=len(args.num_neighbors), out_channels=classes,
                      dropout=args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sparse = SparseAdam([emb], lr=args.sparse_lr)
    loaders = node_loaders(args, ctx, data, device)  # after the model: same init
    loop.log(ctx, f"world_size={ctx.world_size} partitions={meta.num_parts} "
             f"embedding={num_nodes}x{args.embedding_dim} classes={classes} "
             f"train batches/epoch={len(loaders[0])}")

    # training, with evaluation after every epoch
    trainer = Trainer(args, ctx, {"model": ddp, "optimizer": optimizer, "embedding": emb,
                                  "sparse_optimizer": sparse}, loaders,
                      lambda batch: step(ddp, emb, optimizer, sparse, batch),
                      ("seeds", lambda b: b.batch_size))
    if args.checkpoint_dir:
        trainer.resume()
    val_acc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, emb, loaders[1], device), "val acc")
    test_acc = None if args.skip_eval else evaluate(model, emb, loaders[2], device)
    if test_acc is not None:
        loop.log(ctx, f"test acc {test_acc:.4f}")
    results = {"test_acc": test_acc, "val_acc": val_acc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": meta.num_parts}
    if args.checkpoint:
        save_checkpoint(args.checkpoint, embeddings=[emb], optimizers=[sparse])
        loop.log(ctx, f"saved the embedding and SparseAdam state to {args.checkpoint}")

    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    loop.finish(ctx, loaders, results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
