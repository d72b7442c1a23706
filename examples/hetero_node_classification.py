"""Distributed heterogeneous node classification: a HeteroConv of SAGEConv layers in
DistributedDataParallel, classifying ``paper`` nodes of a papers/authors/institutions
graph.

    python scripts/partition_graph.py --dataset synthetic --hetero --num-nodes 20000 \\
        --avg-degree 10 --feat-dim 32 --num-classes 4 --num-parts 2 --out parts/hetero
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29513 \\
        examples/hetero_node_classification.py --partition-dir parts/hetero --epochs 5

Seeds are ``("paper", ids)``; batches are ``HeteroData`` with ``x_dict`` and
``edge_index_dict``, as from PyG's ``NeighborLoader``. Layer ``l`` only holds
convolutions whose output is used later (edge types into ``paper`` in the last layer,
into the source types of those in the layer before, ...), so DDP never sees an unused
parameter. Training, evaluation (exact, over every rank), checkpoints and the final JSON
line work as in ``node_classification.py``. After training, ``--layerwise-eval`` computes
test accuracy from exact layer-wise inference over every node (``pyg_dist.infer`` with
the model's ``layerwise_spec()``) and ``--export DIR`` writes every ``--target`` node's
output, in the dataset's node ids.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import HeteroConv, SAGEConv

import pyg_dist
from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      checkpoint, init_process_group, node_split, shutdown_rpc)
from pyg_dist.inference import LayerwiseSpec, export

EdgeType = Tuple[str, str, str]

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
    p = argparse.ArgumentParser(description="Heterogeneous GraphSAGE (HeteroConv) node "
                                            "classification with pyg_dist")
    p.add_argument("--partition-dir", required=True, help="output of scripts/partition_graph.py")
    p.add_argument("--target", default="paper", help="node type to classify")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256, help="seeds per batch per rank")
    p.add_argument("--num-neighbors", type=fanout, default=[10, 5],
                   help="fan-out per hop and edge type, e.g. 10,5 (one GNN layer per hop)")
    p.add_argument("--eval-neighbors", type=fanout, default=None,
                   help="fan-out per hop for val/test (default: --num-neighbors; -1: all)")
    p.add_argument("--lr", type=float, default=0.005)
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
    p.add_argument("--layerwise-eval", action="store_true",
                   help="after training, test accuracy from exact layer-wise inference")
    p.add_argument("--export", metavar="DIR", default=None,
                   help="after training, write every target node's output to DIR")
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
    (in order, each seed once) unless ``--skip-eval``; seeds are ``--target`` nodes."""
    splits = ["train"] if args.skip_eval else ["train", "val", "test"]
    loaders = []
    for i, split in enumerate(splits):
        train = split == "train"
        seeds = node_split(data, split, ctx, node_type=args.target)
        loaders.append(DistNeighborLoader(
            data=data, input_nodes=(args.target, seeds),
            num_neighbors=args.num_neighbors if train else
            (args.eval_neighbors or args.num_neighbors),
            batch_size=args.batch_size, shuffle=train, even_batches=train,
            num_workers=args.num_workers if train else 0, device=device,
            seed=args.seed + i, current_ctx=ctx))
    return loaders


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
class Trainer:
    """The training loop's state: model, optimizer, step count and checkpoints."""

    def __init__(self, args: argparse.Namespace, ctx: DistContext, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, loaders: List[DistNeighborLoader]) -> None:
        self.args, self.ctx, self.model, self.optimizer = args, ctx, model, optimizer
        self.loaders, self.step, self.resumed_from = loaders, 0, None
        self.device = loaders[0].device

    def state(self) -> dict:
        """What a checkpoint holds, by name: anything with state_dict()/load_state_dict()."""
        return {"model": self.model, "optimizer": self.optimizer,
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
        args, loader, target = self.args, self.loaders[0], self.args.target
        self.model.train()
        loss_sum = correct = count = batches = 0
        progress = pyg_dist.track(loader, f"epoch {epoch} train", stream=sys.stdout,
                                  enabled=self.ctx.rank == 0 and args.log_every > 0,
                                  every=args.log_every, unit="batches",
                                  count=("seeds", lambda b: b[target].batch_size))
        for batch in progress:
            self.optimizer.zero_grad()
            n = batch[target].batch_size
            out = self.model(batch.x_dict, batch.edge_index_dict)[:n]
            y = batch[target].y[:n]
            loss = F.cross_entropy(out, y)
            loss.backward()
            self.optimizer.step()
            loss_sum += loss.item() * n
            correct += int((out.argmax(-1) == y).sum())
            count += n
            self.step, batches = self.step + 1, batches + 1
            if args.checkpoint_dir and args.checkpoint_every and \
                    self.step % args.checkpoint_every == 0:
                self.save(epoch)
        if args.checkpoint_dir and not args.checkpoint_every:
            self.save(epoch)
        loss_sum, correct, count = all_reduce([loss_sum, correct, count], self.device)
        return loss_sum / max(count, 1), correct / max(count, 1), batches


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DistNeighborLoader, target: str,
             device: torch.device) -> float:
    """Exact accuracy over every rank's seeds."""
    model.eval()
    correct = total = 0
    for batch in loader:
        n = batch[target].batch_size
        out = model(batch.x_dict, batch.edge_index_dict)[:n]
        correct += int((out.argmax(-1) == batch[target].y[:n]).sum())
        total += n
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


def infer_all(args: argparse.Namespace, ctx: DistContext, model: HeteroSAGE,
              data: Tuple[LocalFeatureStore, LocalGraphStore], device: torch.device) -> dict:
    """Exact layer-wise inference over every node: test accuracy and/or an export."""
    out = {args.target: pyg_dist.infer(model, data, device=device, ctx=ctx)[args.target]}
    results: dict = {}
    if args.layerwise_eval:
        features, rows = data[0], out[args.target]
        lo, hi = rows.local_range            # relabelled ids of the rows this rank computed
        test = features.split_ids("test", args.target)  # relabelled ids of owned test nodes
        test = test[(test >= lo) & (test < hi)]
        pred = rows.local_data[test - lo].argmax(-1)
        y = features.gather(features.resolve(args.target), "y", test)
        correct, total = all_reduce([float((pred == y).sum()), float(test.numel())], device)
        results["layerwise_test_acc"] = round(correct / max(total, 1.0), 4)
    if args.export:
        export(out, args.partition_dir, args.export, overwrite=True, ctx=ctx)
        results["export"] = args.export
    return results


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
    graph_meta = data[1].meta
    if args.target not in graph_meta.node_types:
        raise SystemExit(f"error: --target {args.target!r} is not a node type of the graph "
                         f"({', '.join(graph_meta.node_types)})")
    y = data[0].get_tensor(args.target, "y")
    classes = int(all_reduce([float(y.max()) if y.numel() else -1.0], device,
                             dist.ReduceOp.MAX)[0]) + 1

    # model
    in_channels = {t: data[0].get_tensor_size(t, "x")[1] for t in graph_meta.node_types}
    model = HeteroSAGE(in_channels, graph_meta.edge_types, args.target, args.hidden, classes,
                       len(args.num_neighbors), args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loaders = make_loaders(args, ctx, data, device)  # after the model: same init
    log(ctx, f"world_size={ctx.world_size} partitions={meta['num_parts']} node types="
             f"{list(graph_meta.node_types)} classes={classes} train batches/epoch="
             f"{len(loaders[0])}")

    # training, with evaluation after every epoch
    trainer = Trainer(args, ctx, ddp, optimizer, loaders)
    if args.checkpoint_dir:
        trainer.resume()
    val_acc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, loaders[1], args.target, device),
        "val acc")
    test_acc = None if args.skip_eval else evaluate(model, loaders[2], args.target, device)
    if test_acc is not None:
        log(ctx, f"test acc {test_acc:.4f}")
    results = {"test_acc": test_acc, "val_acc": val_acc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": meta["num_parts"]}

    if args.layerwise_eval or args.export:
        results.update(infer_all(args, ctx, model, data, device))

    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    finish(ctx, loaders, results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
