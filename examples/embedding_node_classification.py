"""Node classification without input features: a learnable embedding per node
(:class:`pyg_dist.DistEmbedding`, sharded like the graph) feeding GraphSAGE.

    python scripts/partition_graph.py --dataset Cora --root data/planetoid --num-parts 2 \\
        --out parts/cora
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29514 \\
        examples/embedding_node_classification.py --partition-dir parts/cora --epochs 30

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
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist import (DistContext, DistEmbedding, DistNeighborLoader, LocalFeatureStore,
                      LocalGraphStore, SparseAdam, checkpoint, init_process_group, init_rpc,
                      node_split, shutdown_rpc)
from pyg_dist.embedding import save_checkpoint

# torch.distributed.rpc passes a gloo Backend where a ProcessGroup is expected (a
# torch-internal deprecation warning, once per rank): keep the output readable.
warnings.filterwarnings("ignore", message=".*as a ProcessGroup.*", category=UserWarning)


# ---- arguments ----------------------------------------------------------------------
def fanout(text: str) -> List[int]:
    """``"10,5"`` -> ``[10, 5]`` (``-1`` takes every neighbour)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or any(v < -1 for v in values):
        raise argparse.ArgumentTypeError(f"expected fan-outs >= -1, got {text!r}")
    return values


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Learnable node embeddings + GraphSAGE with "
                                            "pyg_dist")
    p.add_argument("--partition-dir", required=True, help="output of scripts/partition_graph.py")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64, help="seeds per batch per rank")
    p.add_argument("--num-neighbors", type=fanout, default=[25, 10],
                   help="fan-out per hop, e.g. 25,10 (one GNN layer per hop)")
    p.add_argument("--eval-neighbors", type=fanout, default=[-1, -1],
                   help="fan-out per hop for val/test (-1: all)")
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (GNN)")
    p.add_argument("--sparse-lr", type=float, default=0.05, help="SparseAdam learning rate")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--num-workers", type=int, default=0,
                   help="sampler processes per trainer for training (0: sample in-process)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cpu: gloo; cuda: NCCL, one GPU per local rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rpc-timeout", type=float, default=60.0,
                   help="seconds before a silent peer is declared lost")
    p.add_argument("--skip-eval", action="store_true", help="train only")
    p.add_argument("--log-every", type=int, default=50,
                   help="progress within an epoch off a terminal: a line every N batches "
                        "(0: none)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="save the training state here and resume from it on start")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="save every N training batches (0: at the end of every epoch)")
    p.add_argument("--checkpoint", default=None,
                   help="folder to save the embedding and its optimizer state to at the end")
    return p.parse_args()


def log(ctx: DistContext, message: str) -> None:
    if ctx.rank == 0:
        print(message, flush=True)


def all_reduce(values: List[float], device: torch.device, op: Any = None) -> List[float]:
    """Element-wise sum (or ``op``) over ranks; the values themselves in one process."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t.tolist()


# ---- data ---------------------------------------------------------------------------
def make_loaders(args: argparse.Namespace, ctx: DistContext, data: Tuple[Any, Any],
                 device: torch.device) -> List[DistNeighborLoader]:
    """Training loader (shuffled, padded, ``--num-workers``), then val and test loaders
    (in order, each seed once) unless ``--skip-eval``."""
    splits = ["train"] if args.skip_eval else ["train", "val", "test"]
    loaders = []
    for i, split in enumerate(splits):
        train = split == "train"
        loaders.append(DistNeighborLoader(
            data=data, input_nodes=node_split(data, split, ctx),
            num_neighbors=args.num_neighbors if train else
            (args.eval_neighbors or args.num_neighbors),
            batch_size=args.batch_size, shuffle=train, even_batches=train,
            num_workers=args.num_workers if train else 0, device=device,
            seed=args.seed + i, current_ctx=ctx))
    return loaders


# ---- training and evaluation --------------------------------------------------------
class Trainer:
    """The training loop's state: model, embedding, optimizers, step count, checkpoints."""

    def __init__(self, args: argparse.Namespace, ctx: DistContext, model: torch.nn.Module,
                 emb: DistEmbedding, optimizer: torch.optim.Optimizer, sparse: SparseAdam,
                 loaders: List[DistNeighborLoader]) -> None:
        self.args, self.ctx, self.model, self.optimizer = args, ctx, model, optimizer
        self.emb, self.sparse = emb, sparse
        self.loaders, self.step, self.resumed_from = loaders, 0, None
        self.device = loaders[0].device

    def state(self) -> dict:
        """What a checkpoint holds, by name: anything with state_dict()/load_state_dict()."""
        return {"model": self.model, "optimizer": self.optimizer, "embedding": self.emb,
                "sparse_optimizer": self.sparse,
                **{f"loader{i}": loader for i, loader in enumerate(self.loaders)}}

    def resume(self) -> None:
        """Loads ``--checkpoint-dir``'s newest checkpoint, if there is one (collective)."""
        info = checkpoint.load(self.args.checkpoint_dir, state=self.state())
        if info is None:
            log(self.ctx, f"checkpoint: none in {self.args.checkpoint_dir} yet, starting "
                          f"from scratch")
            return
        self.step = self.resumed_from = info.step
        epoch, batch = info.positions[0]
        how = "exactly" if info.exact else \
            f"from the next epoch's start: saved by {info.world_size} ranks"
        log(self.ctx, f"checkpoint: resumed {how} at epoch {epoch + 1} batch {batch} step "
                      f"{info.step} from {info.path}")

    def save(self, epoch: int) -> None:
        checkpoint.save(self.args.checkpoint_dir, self.step,
                        state={**self.state(), "epoch": epoch})

    def fit(self, validate: Optional[Callable[[], float]], metric: str
            ) -> Tuple[Optional[float], dict]:
        """Trains the epochs left (from where a checkpoint left off), validating after
        each; returns the last validation score and the training figures."""
        val = loss = acc = None
        seconds: List[float] = []
        batches = 0
        for epoch in range(self.loaders[0].epoch + 1, self.args.epochs + 1):
            start = time.perf_counter()
            loss, acc, batches = self.train_epoch(epoch)
            seconds.append(time.perf_counter() - start)
            val = validate() if validate is not None else None
            log(self.ctx, f"epoch {epoch:3d} | loss {loss:.4f} | train acc {acc:.4f} | "
                          f"{metric} {val if val is not None else float('nan'):.4f} | "
                          f"{seconds[-1]:.2f}s ({batches / max(seconds[-1], 1e-9):.1f} "
                          f"batches/s)")
        steady = seconds[1:] or seconds  # the first epoch warms up
        return val, {"train_loss": loss, "train_acc": acc,
                     "epoch_s": sum(steady) / len(steady) if steady else None,
                     "batches_per_epoch": batches, "resumed_from": self.resumed_from}

    def train_epoch(self, epoch: int) -> Tuple[float, float, int]:
        """One pass over the training loader: (mean loss, accuracy) over every rank, and
        the batches trained."""
        args, loader = self.args, self.loaders[0]
        self.model.train()
        loss_sum = correct = count = batches = 0
        progress = pyg_dist.track(loader, f"epoch {epoch} train", stream=sys.stdout,
                                  enabled=self.ctx.rank == 0 and args.log_every > 0,
                                  every=args.log_every, unit="batches",
                                  count=("seeds", lambda b: b.batch_size))
        for batch in progress:
            self.optimizer.zero_grad()
            self.sparse.zero_grad()
            x = self.emb(batch.n_id, device=self.device)  # rows of the sampled nodes
            out = self.model(x, batch.edge_index)[:batch.batch_size]
            y = batch.y[:batch.batch_size]
            loss = F.cross_entropy(out, y)
            loss.backward()
            self.optimizer.step()
            self.sparse.step()  # a collective: each row's gradient goes to its owner
            loss_sum += loss.item() * y.numel()
            correct += int((out.argmax(-1) == y).sum())
            count += y.numel()
            self.step, batches = self.step + 1, batches + 1
            if args.checkpoint_dir and args.checkpoint_every and \
                    self.step % args.checkpoint_every == 0:
                self.save(epoch)
        if args.checkpoint_dir and not args.checkpoint_every:
            self.save(epoch)
        loss_sum, correct, count = all_reduce([loss_sum, correct, count], self.device)
        return loss_sum / max(count, 1), correct / max(count, 1), batches


@torch.no_grad()
def evaluate(model: torch.nn.Module, emb: DistEmbedding, loader: DistNeighborLoader,
             device: torch.device) -> float:
    """Exact accuracy over every rank's seeds."""
    model.eval()
    correct = total = 0
    for batch in loader:
        x = emb(batch.n_id, device=device)
        out = model(x, batch.edge_index)[:batch.batch_size]
        correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    correct, total = all_reduce([correct, total], device)
    return correct / max(total, 1)


# ---- the job ------------------------------------------------------------------------
def setup(args: argparse.Namespace) -> Tuple[DistContext, torch.device]:
    """This process's place in the job (from torchrun's environment), its device, and
    the process group (gloo on CPU, NCCL on GPUs) when there are peers."""
    torch.manual_seed(args.seed)
    ctx = DistContext.from_env(rpc_timeout=args.rpc_timeout)
    device = torch.device("cpu")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("error: --device cuda but CUDA is not available")
        device = torch.device("cuda", ctx.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if ctx.is_distributed:  # collectives time out after --rpc-timeout, naming a lost rank
        init_process_group("nccl" if device.type == "cuda" else "gloo", ctx)
    return ctx, device


def finish(ctx: DistContext, loaders: List[Any], results: dict) -> None:
    """Closes the loaders, leaves RPC and the process group, and prints the results as
    ONE JSON line (rank 0; NaN becomes null)."""
    for loader in loaders:
        loader.close()
    shutdown_rpc()
    if dist.is_initialized():
        dist.destroy_process_group()
    if ctx.rank == 0:
        line = json.dumps({k: (None if v != v else round(v, 4)) if isinstance(v, float) else v
                           for k, v in results.items()})
        print(line + "\n", end="", flush=True)  # one write: other ranks share this pipe


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    ctx, device = setup(args)

    # data: this rank's partition
    meta = json.loads((Path(args.partition_dir) / "META.json").read_text())
    pid = ctx.partition_id(meta["num_parts"])
    data = (LocalFeatureStore.from_partition(args.partition_dir, pid),
            LocalGraphStore.from_partition(args.partition_dir, pid))
    # Join RPC serving this partition before creating the table: its rows are read and
    # updated over the same RPC group the loaders sample through.
    init_rpc(ctx, data)
    node_type = data[1].meta.node_types[0]
    y = data[0].get_tensor(node_type, "y")
    classes = int(all_reduce([float(y.max()) if y.numel() else -1.0], device,
                             dist.ReduceOp.MAX)[0]) + 1

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
    loaders = make_loaders(args, ctx, data, device)  # after the model: same init
    log(ctx, f"world_size={ctx.world_size} partitions={meta['num_parts']} "
             f"embedding={num_nodes}x{args.embedding_dim} classes={classes} "
             f"train batches/epoch={len(loaders[0])}")

    # training, with evaluation after every epoch
    trainer = Trainer(args, ctx, ddp, emb, optimizer, sparse, loaders)
    if args.checkpoint_dir:
        trainer.resume()
    val_acc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, emb, loaders[1], device), "val acc")
    test_acc = None if args.skip_eval else evaluate(model, emb, loaders[2], device)
    if test_acc is not None:
        log(ctx, f"test acc {test_acc:.4f}")
    results = {"test_acc": test_acc, "val_acc": val_acc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": meta["num_parts"]}
    if args.checkpoint:
        save_checkpoint(args.checkpoint, embeddings=[emb], optimizers=[sparse])
        log(ctx, f"saved the embedding and SparseAdam state to {args.checkpoint}")

    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    finish(ctx, loaders, results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
