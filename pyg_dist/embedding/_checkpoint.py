"""Embedding-only checkpoints: a thin wrapper over :mod:`pyg_dist.checkpoint`.

::

    save_checkpoint(path, embeddings=[emb], optimizers=[opt])   # collective
    load_checkpoint(path, embeddings=[emb], optimizers=[opt])   # collective

is :func:`pyg_dist.checkpoint.save`/``load`` with ``state={"embedding.<name>": emb,
"optimizer.<table names>": opt}`` (``keep=1``): tables are matched by name, optimizers
by the names of their tables (and their class). Rows are stored by global id, so a
checkpoint loads on any number of ranks. This module imports nothing of the embedding
package (the objects come in as arguments), so the tables and optimizers can offer
``save``/``load`` methods without an import cycle.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Sequence, Union

from pyg_dist.checkpoint import CheckpointError, load, save

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError"]

PathLike = Union[str, os.PathLike]


def _state(embeddings: Any, optimizers: Any, verb: str) -> Dict[str, Any]:
    """``state`` for the one checkpoint: ``embedding.<name>`` and ``optimizer.<names>``."""
    embs = list(embeddings) if isinstance(embeddings, (list, tuple)) else [embeddings]
    opts = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
    state: Dict[str, Any] = {}
    for emb in embs:
        if not hasattr(emb, "weight") or not hasattr(emb, "state_dict"):
            raise TypeError(f"expected a pyg_dist DistEmbedding, got {type(emb).__name__}")
        state[f"embedding.{emb.name}"] = emb
    for opt in opts:
        if not hasattr(opt, "params") or not hasattr(opt, "state_dict"):
            raise TypeError(f"expected a pyg_dist SparseOptimizer, got {type(opt).__name__}")
        state[f"optimizer.{'+'.join(e.name for e in opt.params)}"] = opt
    if not state:
        raise ValueError(f"nothing to {verb}: pass embeddings=[...] and/or optimizers=[...]")
    return state


def save_checkpoint(path: PathLike, embeddings: Sequence[Any] = (),
                    optimizers: Sequence[Any] = ()) -> None:
    """Saves tables and sparse optimizer state together, atomically (collective).

    Args:
        path: the checkpoint folder, visible to every rank (created if missing).
        embeddings (DistEmbedding or Sequence[DistEmbedding]): the tables to save.
        optimizers (SparseOptimizer or Sequence[SparseOptimizer]): optimizers whose
            state and hyper-parameters to save (their tables are saved only if also in
            ``embeddings``).

    Raises:
        CheckpointError, OSError, ...: this rank's failure; :class:`RuntimeError`
            naming the rank(s) that failed on the others.
    """
    save(path, 0, _state(embeddings, optimizers, "save"), keep=1)


def load_checkpoint(path: PathLike, embeddings: Sequence[Any] = (),
                    optimizers: Sequence[Any] = ()) -> None:
    """Loads tables and optimizer state saved by :func:`save_checkpoint` (or by
    :func:`pyg_dist.checkpoint.save` under the same keys), on any number of ranks
    (collective).

    Raises:
        CheckpointError: naming the file or entry, if the checkpoint is missing, damaged
            or does not hold what is asked for (:class:`RuntimeError` naming the rank
            on the other ranks).
    """
    if load(path, _state(embeddings, optimizers, "load"), restore_rng=False) is None:
        raise CheckpointError(f"{path} holds no pyg_dist checkpoint (no {path}/LATEST): "
                              f"nothing to load")
