"""Node classification without input features: a learnable embedding per node
(:class:`pyg_dist.DistEmbedding`, sharded like the graph) feeding GraphSAGE.

    python scripts/partition_graph.py --dataset Cora --root data/planetoid --num-parts 2 \\
        --out parts/cora
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29514 \\
        examples/embedding_node_classification.py --partition-dir parts/cora --epochs 30

The node features stored in the partitions are ignored: each batch's input is
``embedding(batch.n_id)``, the rows of its sampled nodes, read by global id from the
ranks that own them. The GNN's dense weights are trained by ``Adam`` inside
``DistributedDataParallel``; the embedding rows a batch touched are trained by
:class:`pyg_dist.SparseAdam`, whose ``step()`` sends every row's gradient to its
owner rank (a collective: every rank steps once per batch, which the evenly padded
training loader guarantees). ``--checkpoint DIR`` saves the table and the optimizer
state at the end, together in one atomic checkpoint (loadable on any number of ranks
with :func:`pyg_dist.embedding.load_checkpoint`).

On Cora (2 partitions, 2 trainers, defaults) test accuracy is about 0.62-0.65: with
140 labelled nodes and no features, only the structure around them informs the
embeddings (chance is 0.14, the majority class 0.32).
"""
from __future__ import annotations

import argparse
from typing import Any, Tuple

import torch
from torch import Tensor
from torch_geometric.nn import GraphSAGE

import _epochs as E
import _job as J
import _nodes as N
from pyg_dist import DistEmbedding, SparseAdam, init_rpc
from pyg_dist.embedding import save_checkpoint


def build_parser() -> argparse.ArgumentParser:
    p = J.base_parser("Learnable node embeddings + GraphSAGE with pyg_dist", epochs=30,
                      batch_size=64, lr=0.01, hidden=64, fanout="25,10")
    p.set_defaults(eval_neighbors=[-1, -1])
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--sparse-lr", type=float, default=0.05, help="SparseAdam learning rate")
    p.add_argument("--checkpoint", default=None,
                   help="folder to save the embedding and its optimizer state to at the end")
    return p


def main() -> None:
    args = build_parser().parse_args()
    job = J.setup(args)
    # Join RPC serving this rank's partition before creating the table: the table's
    # rows are read and updated over the same RPC group the loaders sample through.
    init_rpc(job.ctx, job.data)
    num_nodes = job.meta.num_nodes[job.meta.node_type(None)]
    generator = torch.Generator().manual_seed(args.seed + job.ctx.rank)
    emb = DistEmbedding(num_nodes, args.embedding_dim, name="node_embedding",
                        init_func=lambda shape, dtype: 0.1 * torch.randn(
                            shape, dtype=dtype, generator=generator),
                        partition=job.meta)
    classes = N.num_classes(job)
    model = GraphSAGE(args.embedding_dim, args.hidden, num_layers=len(args.num_neighbors),
                      out_channels=classes, dropout=args.dropout)
    ddp = J.wrap_ddp(model, job)
    dense = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sparse = SparseAdam([emb], lr=args.sparse_lr)

    def predict(net: torch.nn.Module) -> N.Predict:
        def forward(batch: Any) -> Tuple[Tensor, Tensor]:
            n = batch.batch_size
            x = emb(batch.n_id, device=job.device)
            return net(x, batch.edge_index)[:n], batch.y[:n]
        return forward

    loaders = N.node_loaders(job, args, "train", "val", "test")
    J.log(job, f"world_size={job.ctx.world_size} partitions={job.meta.num_parts} "
               f"embedding={num_nodes}x{args.embedding_dim} classes={classes} "
               f"train batches/epoch={len(loaders[0])}")
    ckpt = E.Checkpoints(job, args, ddp, [dense, sparse], embeddings=[emb], loaders=loaders)
    ckpt.resume()
    results = E.fit(job, args, loaders, N.classify_step(predict(ddp), [dense, sparse]),
                    lambda loader: N.accuracy(job, model, loader, predict(model)), ckpt)
    if args.checkpoint:
        save_checkpoint(args.checkpoint, embeddings=[emb], optimizers=[sparse])
        J.log(job, f"saved the embedding and SparseAdam state to {args.checkpoint}")
    J.finish(job, loaders)
    J.emit(job, results, args)


if __name__ == "__main__":
    J.run(main)
