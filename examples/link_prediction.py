"""Distributed link prediction: GraphSAGE encoder + dot-product decoder, trained with
``DistLinkNeighborLoader`` and binary negative sampling, scored by AUC on held-out edges.

    python scripts/partition_graph.py --dataset Cora --root data/planetoid --num-parts 2 \\
        --out parts/cora
    torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port=29512 \\
        examples/link_prediction.py --partition-dir parts/cora --epochs 5

Held-out edges are chosen by a hash of the unordered pair of node ids, so every rank
agrees on them without communication and both directions of an undirected edge land in
the same split. They are never supervision targets during training and are removed from
every sampled subgraph before message passing (train and evaluation alike), so the model
never sees them. AUC is exact: every rank's scores are gathered once and ranked
(Mann-Whitney). Checkpoints and the final JSON line work as in ``node_classification.py``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist import (DistContext, DistLinkNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      checkpoint, edge_split, init_process_group, shutdown_rpc)

SPLITS = ("train", "val", "test")

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
    p = argparse.ArgumentParser(description="GraphSAGE link prediction with pyg_dist")
    p.add_argument("--partition-dir", required=True, help="output of scripts/partition_graph.py")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256, help="seed edges per batch per rank")
    p.add_argument("--num-neighbors", type=fanout, default=[10, 5],
                   help="fan-out per hop, e.g. 10,5 (one GNN layer per hop)")
    p.add_argument("--eval-neighbors", type=fanout, default=None,
                   help="fan-out per hop for val/test (default: --num-neighbors; -1: all)")
    p.add_argument("--val-frac", type=float, default=0.05)
    p.add_argument("--test-frac", type=float, default=0.10)
    p.add_argument("--lr", type=float, default=0.005)
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
    return p.parse_args()


def log(ctx: DistContext, message: str) -> None:
    if ctx.rank == 0:
        print(message, flush=True)


def all_reduce(values: List[float], device: torch.device) -> List[float]:
    """Element-wise sum over ranks; the values themselves in one process."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()


def gather_cat(values: Tensor) -> Tensor:
    """Every rank's 1-d ``values`` (any lengths) concatenated in rank order."""
    if not dist.is_initialized():
        return values
    n = torch.tensor([values.numel()], device=values.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    padded = torch.zeros(int(max(sizes).item()), dtype=values.dtype, device=values.device)
    padded[:values.numel()] = values
    out = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(out, padded)
    return torch.cat([o[:int(s.item())] for o, s in zip(out, sizes)])


# ---- data: held-out edges and loaders -----------------------------------------------
def split_of(src: Tensor, dst: Tensor, args: argparse.Namespace) -> Tensor:
    """0 (train), 1 (val) or 2 (test) per edge, from a hash of the unordered pair (the
    same for both directions and on every rank)."""
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    h = (lo * 0x9E3779B1 + hi * 0x85EBCA77) & 0x7FFFFFFF
    h = (h ^ (h >> 15)) * 0x2C1B3C6D & 0x7FFFFFFF
    u = (h ^ (h >> 12)).double() / 2**31
    out = torch.zeros_like(src)
    out[u < args.val_frac + args.test_frac] = 1
    out[u < args.test_frac] = 2
    return out


def drop_held_out(batch: Any, args: argparse.Namespace) -> Any:
    """Batch transform: removes val/test edges from the sampled subgraph."""
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    keep = split_of(src, dst, args) == 0
    batch.edge_index, batch.e_id = batch.edge_index[:, keep], batch.e_id[keep]
    return batch


def make_loaders(args: argparse.Namespace, ctx: DistContext, data: Tuple[Any, Any],
                 device: torch.device) -> Dict[str, DistLinkNeighborLoader]:
    """One loader per split over this rank's share of the stored edges (``edge_split``)."""
    edges = edge_split(data, ctx)
    which = split_of(edges[0], edges[1], args)
    loaders = {}
    for i, name in enumerate(SPLITS):
        if name != "train" and args.skip_eval:
            continue
        train = name == "train"
        loaders[name] = DistLinkNeighborLoader(
            data=data, edge_label_index=edges[:, which == i], neg_sampling="binary",
            num_neighbors=args.num_neighbors if train else
            (args.eval_neighbors or args.num_neighbors),
            batch_size=args.batch_size, shuffle=train, even_batches=train,
            num_workers=args.num_workers if train else 0, device=device,
            seed=args.seed + i, current_ctx=ctx, transform=lambda b: drop_held_out(b, args))
    return loaders


# ---- model --------------------------------------------------------------------------
class LinkModel(torch.nn.Module):
    """GraphSAGE node encoder; an edge's score is the dot product of its ends."""

    def __init__(self, in_channels: int, hidden: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.encoder = GraphSAGE(in_channels, hidden, num_layers=num_layers, dropout=dropout)

    def forward(self, x: Tensor, edge_index: Tensor, edge_label_index: Tensor) -> Tensor:
        h = self.encoder(x, edge_index)
        return (h[edge_label_index[0]] * h[edge_label_index[1]]).sum(-1)


# ---- training and evaluation --------------------------------------------------------
class Trainer:
    """The training loop's state: model, optimizer, step count and checkpoints."""

    def __init__(self, args: argparse.Namespace, ctx: DistContext, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, loaders: List[DistLinkNeighborLoader]) -> None:
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
        """One pass over the training loader: (mean loss, accuracy of the sign of the
        score) over every rank, and the batches trained."""
        args, loader = self.args, self.loaders[0]
        self.model.train()
        loss_sum = correct = count = batches = 0
        progress = pyg_dist.track(loader, f"epoch {epoch} train", stream=sys.stdout,
                                  enabled=self.ctx.rank == 0 and args.log_every > 0,
                                  every=args.log_every, unit="batches",
                                  count=("edges", lambda b: b.input_id.numel()))
        for batch in progress:
            self.optimizer.zero_grad()
            logits = self.model(batch.x, batch.edge_index, batch.edge_label_index)
            label = batch.edge_label.float()
            loss = F.binary_cross_entropy_with_logits(logits, label)
            loss.backward()
            self.optimizer.step()
            loss_sum += loss.item() * label.numel()
            correct += int(((logits > 0).float() == label).sum())
            count += label.numel()
            self.step, batches = self.step + 1, batches + 1
            if args.checkpoint_dir and args.checkpoint_every and \
                    self.step % args.checkpoint_every == 0:
                self.save(epoch)
        if args.checkpoint_dir and not args.checkpoint_every:
            self.save(epoch)
        loss_sum, correct, count = all_reduce([loss_sum, correct, count], self.device)
        return loss_sum / max(count, 1), correct / max(count, 1), batches


def auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve by the rank-sum formula (tied scores share their mean rank)."""
    pos = labels > 0
    num_pos, num_neg = int(pos.sum()), int((~pos).sum())
    if num_pos == 0 or num_neg == 0:
        return float("nan")
    sorted_scores, order = torch.sort(scores.double())
    _, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True,
                                                  return_counts=True)
    last = torch.cumsum(counts, 0).double()               # 1-based rank of each tie group's end
    mean_rank = last - (counts.double() - 1) / 2
    ranks = torch.empty_like(mean_rank[inverse])
    ranks[order] = mean_rank[inverse]
    return float((ranks[pos].sum() - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg))


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DistLinkNeighborLoader,
             device: torch.device) -> float:
    """AUC over every rank's held-out positives and their sampled negatives."""
    model.eval()
    scores, labels = [torch.empty(0, device=device)], [torch.empty(0, device=device)]
    for batch in loader:
        scores.append(model(batch.x, batch.edge_index, batch.edge_label_index).float())
        labels.append(batch.edge_label.float())
    return auc(gather_cat(torch.cat(scores)).cpu(), gather_cat(torch.cat(labels)).cpu())


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

    # model
    node_type = data[1].meta.node_types[0]
    model = LinkModel(data[0].get_tensor_size(node_type, "x")[1], args.hidden,
                      len(args.num_neighbors), args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                  else None) if ctx.is_distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    loaders = make_loaders(args, ctx, data, device)  # after the model: same init
    log(ctx, f"world_size={ctx.world_size} partitions={meta['num_parts']} train "
             f"batches/epoch={len(loaders['train'])} device={device}")

    # training, with evaluation after every epoch
    trainer = Trainer(args, ctx, ddp, optimizer, list(loaders.values()))
    if args.checkpoint_dir:
        trainer.resume()
    val_auc, figures = trainer.fit(
        None if args.skip_eval else lambda: evaluate(model, loaders["val"], device), "val auc")
    test_auc = None if args.skip_eval else evaluate(model, loaders["test"], device)
    if test_auc is not None:
        log(ctx, f"test auc {test_auc:.4f}")
    results = {"test_auc": test_auc, "val_auc": val_auc, **figures, "epochs": args.epochs,
               "world_size": ctx.world_size, "num_parts": meta["num_parts"]}

    results["total_s"] = time.perf_counter() - started
    # DDP's reducer must not outlive the process group: freed after it, torch destroys
    # the gloo group holding the GIL, and that can deadlock with gloo's own threads
    del trainer, ddp
    finish(ctx, list(loaders.values()), results)


if __name__ == "__main__":  # sampler workers are spawned and re-import this file
    main()
