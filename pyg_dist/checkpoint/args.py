"""The arguments of :func:`pyg_dist.checkpoint.save` and :func:`~pyg_dist.checkpoint.load`,
checked before anything is written or read: a wrong one is a ``TypeError`` or
``ValueError`` naming the argument and what it must be (not an ``AttributeError`` from
deep inside a save)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, List

import torch

from pyg_dist.embedding.embedding import DistEmbedding
from pyg_dist.embedding.optim import SparseOptimizer
from pyg_dist.loader.base import DistLoader


@dataclass
class Objects:
    """What one :func:`save` or :func:`load` call saves or fills, as checked lists.

    Args:
        model: the model (``None``: none).
        optimizers: dense optimizers of ``model``.
        embeddings: :class:`DistEmbedding` tables.
        sparse_optimizers: their optimizers.
        loaders: loaders whose positions to save or restore.
    """
    model: Any
    optimizers: List[torch.optim.Optimizer]
    embeddings: List[DistEmbedding]
    sparse_optimizers: List[SparseOptimizer]
    loaders: List[DistLoader]

    def kinds(self) -> tuple:
        """What must match on every rank."""
        return (self.model is not None, len(self.optimizers),
                bool(self.embeddings or self.sparse_optimizers), len(self.loaders))


def _listed(value: Any, name: str, kind: type, what: str) -> List[Any]:
    """``value`` (one object, a list or tuple of them, or ``None``) as a list of ``kind``."""
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            where = f"{name}[{i}]" if isinstance(value, (list, tuple)) else name
            raise TypeError(f"checkpoint: {where} must be {what}, got {type(item).__name__}")
    return items


def objects(model: Any, optimizer: Any, embeddings: Any, sparse_optimizers: Any,
            loaders: Any) -> Objects:
    """Checks the objects given to :func:`save`/:func:`load` and returns them as lists.

    Raises:
        TypeError: naming the argument (and index) of the first object of a wrong kind.
        ValueError: for an optimizer without its model.
    """
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"checkpoint: model must be a torch.nn.Module (plain or "
                        f"DistributedDataParallel), got {type(model).__name__}")
    out = Objects(
        model, _listed(optimizer, "optimizer", torch.optim.Optimizer,
                       "a torch.optim.Optimizer (or a list of them)"),
        _listed(embeddings, "embeddings", DistEmbedding, "a pyg_dist DistEmbedding"),
        _listed(sparse_optimizers, "sparse_optimizers", SparseOptimizer,
                "a pyg_dist SparseAdam or SparseAdagrad"),
        _listed(loaders, "loaders", DistLoader,
                "a pyg_dist loader (DistNeighborLoader or DistLinkNeighborLoader)"))
    if out.optimizers and model is None:
        raise ValueError("checkpoint: optimizer given without its model: pass model=... too")
    return out


def check_path(path: Any) -> None:
    """Raises ``TypeError`` unless ``path`` is a ``str`` or ``os.PathLike``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint: path must be a str or os.PathLike folder, got "
                        f"{type(path).__name__}")


def check_save(step: Any, keep: Any, extra: Any) -> None:
    """Checks :func:`save`'s plain arguments; raises ``ValueError`` naming the argument."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2 ** 63:
        raise ValueError(f"step must be an integer in [0, 2**63), got {step!r}")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    if not isinstance(extra, dict):
        raise ValueError(f"extra must be a dict, got {type(extra).__name__}")
    try:
        json.dumps(extra)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"extra must be a dict of JSON values: {exc}") from None


def check_flag(value: Any, name: str) -> None:
    """Raises ``TypeError`` unless ``value`` is a ``bool``."""
    if not isinstance(value, bool):
        raise TypeError(f"checkpoint: {name} must be True or False, got {value!r}")
