"""The ``state`` of :func:`pyg_dist.checkpoint.save`/:func:`~pyg_dist.checkpoint.load`:
what each value is (its kind), checked before anything is written or read.

Kinds, tried in this order:

- ``module``: a ``torch.nn.Module`` (plain or DDP), through DCP;
- ``optimizer``: a ``torch.optim.Optimizer`` of one module in ``state``, through DCP;
- ``loader``: a pyg_dist loader (exact-resume position, per rank);
- ``stateful``: any object with ``state_dict()``/``load_state_dict()`` whose state is
  tensors, plain containers and JSON values, and sharded tensors (``DistTensor``, saved
  by global row and resharded on load): ``DistEmbedding``, ``SparseAdam``/``SparseAdagrad``,
  LR schedulers, user objects;
- ``json``: a plain JSON value (returned by ``load``, also written back into ``state``).

A wrong argument is a ``TypeError`` or ``ValueError`` naming it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import torch


MODULE, OPTIMIZER, LOADER, STATEFUL, JSON = "module", "optimizer", "loader", "stateful", "json"
KINDS = (MODULE, OPTIMIZER, LOADER, STATEFUL, JSON)


@dataclass(frozen=True)
class Entry:
    """One value of ``state``.

    Args:
        key: the user's name for it.
        kind: one of :data:`KINDS`.
        obj: the value.
        cls: the class name of a ``stateful`` entry (checked at load), else ``""``.
    """
    key: str
    kind: str
    obj: Any
    cls: str = ""

    def spec(self) -> Tuple[str, str, str]:
        """What must match across ranks and between save and load."""
        return (self.key, self.kind, self.cls)

    def describe(self) -> str:
        return f"{self.kind} {self.cls}".strip()


def is_stateful(obj: Any) -> bool:
    """Whether ``obj`` has callable ``state_dict`` and ``load_state_dict``."""
    return callable(getattr(obj, "state_dict", None)) and \
        callable(getattr(obj, "load_state_dict", None))


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(map(_is_json, value))
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def entry_of(key: Any, value: Any) -> Entry:
    """The :class:`Entry` for ``state[key]``; raises naming the key when it is none."""
    if not isinstance(key, str) or not key:
        raise TypeError(f"checkpoint: state keys must be non-empty strings, got {key!r}")
    if isinstance(value, torch.nn.Module):
        return Entry(key, MODULE, value)
    if isinstance(value, torch.optim.Optimizer):
        return Entry(key, OPTIMIZER, value)
    # imported here: the checkpoint command reads checkpoints without torch_geometric
    from pyg_dist.loader._base import DistLoader

    if isinstance(value, DistLoader):
        return Entry(key, LOADER, value)
    if is_stateful(value):
        return Entry(key, STATEFUL, value, type(value).__name__)
    if _is_json(value):
        try:
            json.dumps(value, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"checkpoint: state['{key}'] is not a JSON value: {exc}") from None
        return Entry(key, JSON, value)
    raise TypeError(f"checkpoint: state['{key}'] must be a torch.nn.Module, an Optimizer, a "
                    f"pyg_dist loader, an object with state_dict()/load_state_dict() or a "
                    f"JSON value, got {type(value).__name__}")


def entries(state: Any) -> List[Entry]:
    """The entries of ``state``, sorted by key; raises naming what is wrong."""
    if not isinstance(state, dict):
        raise TypeError(f"checkpoint: state must be a dict of named objects, got "
                        f"{type(state).__name__}")
    out = [entry_of(key, state[key]) for key in sorted(state, key=str)]
    seen: Dict[int, str] = {}
    for entry in out:
        if entry.kind != JSON and id(entry.obj) in seen:
            raise ValueError(f"checkpoint: state['{entry.key}'] is the same object as "
                             f"state['{seen[id(entry.obj)]}']")
        seen[id(entry.obj)] = entry.key
    owner_of(out)  # every optimizer has its module
    return out


def owner_of(items: List[Entry]) -> Dict[str, str]:
    """``{optimizer key: key of the module whose parameters it trains}``.

    Raises:
        ValueError: naming an optimizer no single module of ``state`` holds the
            parameters of.
    """
    modules = [(e.key, {id(p) for p in e.obj.parameters()}) for e in items if e.kind == MODULE]
    owners = {}
    for entry in (e for e in items if e.kind == OPTIMIZER):
        params = {id(p) for group in entry.obj.param_groups for p in group["params"]}
        found = [key for key, held in modules if params <= held]
        if not found:
            raise ValueError(f"checkpoint: optimizer state['{entry.key}'] trains parameters of "
                             f"no single module in state: pass its model too (e.g. "
                             f"state={{'model': model, ...}})")
        owners[entry.key] = found[0]
    return owners


#: keywords :func:`save`/:func:`load` took in 0.1.0, and what replaces each
REMOVED_KEYWORDS: Dict[str, str] = {
    "model": "state={'model': model}",
    "optimizer": "state={'optimizer': optimizer} (several: one key each)",
    "embeddings": "state={'embedding': emb} (several tables: one key each)",
    "sparse_optimizers": "state={'sparse_optimizer': opt} (several: one key each)",
    "loaders": "state={'loader': loader} (several: one key each)",
    "extra": "state={'extra': values} (a JSON value, returned in CheckpointInfo.values)",
}


def refuse_keywords(what: str, kwargs: Dict[str, Any]) -> None:
    """Raises ``TypeError`` for keyword arguments :func:`save`/:func:`load` do not take,
    naming the ``state=`` form that replaces a removed keyword."""
    if not kwargs:
        return
    name = sorted(kwargs)[0]
    if name in REMOVED_KEYWORDS:
        raise TypeError(f"checkpoint.{what}() no longer takes {name}= (removed after 0.1.0): "
                        f"pass {REMOVED_KEYWORDS[name]}")
    raise TypeError(f"checkpoint.{what}() got an unexpected keyword argument '{name}'")


def check_path(path: Any) -> None:
    """Raises ``TypeError`` unless ``path`` is a ``str`` or ``os.PathLike``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint: path must be a str or os.PathLike folder, got "
                        f"{type(path).__name__}")


def check_save(step: Any, keep: Any) -> None:
    """Checks :func:`save`'s plain arguments; raises ``ValueError`` naming the argument."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2 ** 63:
        raise ValueError(f"step must be an integer in [0, 2**63), got {step!r}")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")


def check_flag(value: Any, name: str) -> None:
    """Raises ``TypeError`` unless ``value`` is a ``bool``."""
    if not isinstance(value, bool):
        raise TypeError(f"checkpoint: {name} must be True or False, got {value!r}")
