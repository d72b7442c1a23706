"""Node classification pieces of the examples: loaders per split, the training step,
exact accuracy over every rank."""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from _epochs import Step
from _job import Job, all_max, all_sum
from pyg_dist import DistNeighborLoader, node_split


def num_classes(job: Job, node_type: Optional[str] = None) -> int:
    """Classes of ``y`` (max label over every partition, plus one)."""
    features = job.data[0]
    y = features.tensor(features.meta.node_type(node_type), "y")
    return all_max(job, int(y.max()) if y.numel() else -1) + 1


def feat_dim(job: Job, node_type: Optional[str] = None) -> int:
    features = job.data[0]
    return int(features.tensor(features.meta.node_type(node_type), "x").size(1))


def normalize_rows(batch: Any) -> Any:
    """Batch transform: every node's ``x`` divided by its row sum (PyG's NormalizeFeatures)."""
    for store in batch.node_stores:
        if "x" in store:
            store.x = store.x / store.x.sum(-1, keepdim=True).clamp_(min=1e-12)
    return batch


Predict = Callable[[Any], Tuple[Tensor, Tensor]]  # batch -> (logits of its seeds, labels)


def splits(args: argparse.Namespace) -> Tuple[str, ...]:
    """The node splits an example loads: train, then val and test unless --skip-eval."""
    return ("train",) if args.skip_eval else ("train", "val", "test")


def node_loaders(job: Job, args: argparse.Namespace, *split_names: str,
                 node_type: Optional[str] = None, train_options: Optional[Dict[str, Any]] = None,
                 **options: Any) -> List[DistNeighborLoader]:
    """One loader per split over this rank's share of it (``node_split``).

    The first (training) loader shuffles, samples with ``--num-neighbors`` in
    ``--num-workers`` processes and pads every rank to the same number of batches, as
    DDP's per-batch gradient all-reduce needs. The others (evaluation) go in order
    with ``--eval-neighbors``, in-process, each seed exactly once
    (``even_batches=False``: the unwrapped model runs no collective per batch, and a
    rank that finishes early keeps serving its partition to the others over RPC).
    ``options`` go to every loader, ``train_options`` to the training loader only.
    """
    loaders = []
    for i, split in enumerate(split_names):
        train = i == 0
        ids = node_split(job.data, split, job.ctx, node_type=node_type)
        fanout = args.num_neighbors if train else (args.eval_neighbors or args.num_neighbors)
        loaders.append(DistNeighborLoader(
            data=job.data, num_neighbors=fanout,
            input_nodes=ids if node_type is None else (node_type, ids),
            batch_size=args.batch_size, shuffle=train,
            num_workers=args.num_workers if train else 0, device=job.device,
            even_batches=train, seed=args.seed + i, current_ctx=job.ctx,
            wire_dtype=args.wire_dtype, **options, **((train_options or {}) if train else {})))
    return loaders


def parse_budget(text: str) -> Any:
    """``0.1`` -> a fraction (float); ``200MB``, ``2GB``, ``50000`` -> bytes (int)."""
    units = {"KB": 1e3, "MB": 1e6, "GB": 1e9}
    upper = text.strip().upper()
    try:
        for unit, scale in units.items():
            if upper.endswith(unit):
                return int(float(upper[:-2]) * scale)
        value = float(upper)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction or a size, got {text!r}")
    return int(value) if value > 1 or upper.isdigit() else value


def cache_report(loader: DistNeighborLoader) -> Dict[str, Any]:
    """Feature cache figures of the training loader, over the whole run (this rank, its
    sampler workers included; ``None`` without a cache)."""
    cache = loader.sampler.fetcher.cache
    if cache is None:
        return {"cache_mb": None, "cache_hit_rate": None, "cache_saved_mb": None}
    stats = loader.cache_stats
    return {"cache_mb": round(cache.nbytes / 1e6, 2),
            "cache_hit_rate": round(stats.hit_rate, 4),
            "cache_saved_mb": round(stats.bytes_saved / 1e6, 2)}


def classify_step(predict: Predict, optimizers: Sequence[Any]) -> Step:
    """A training step: cross-entropy of ``predict(batch)``, then every optimizer steps."""
    def step(batch: Any) -> Tuple[float, float, float]:
        for optimizer in optimizers:
            optimizer.zero_grad()
        out, y = predict(batch)
        loss = F.cross_entropy(out, y)
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
        return float(loss.detach()) * y.numel(), int((out.argmax(-1) == y).sum()), y.numel()
    return step


@torch.no_grad()
def accuracy(job: Job, model: torch.nn.Module, loader: Any, predict: Predict) -> float:
    """Exact accuracy over every rank's seeds (one all-reduce of the counts at the end)."""
    model.eval()
    correct = total = 0
    for batch in loader:
        out, y = predict(batch)
        correct += int((out.argmax(-1) == y).sum())
        total += y.numel()
    model.train()
    correct, total = all_sum(job, [correct, total])
    return correct / max(total, 1)
