"""The ``state`` of :func:`pyg_dist.checkpoint.save`/:func:`~pyg_dist.checkpoint.load`:
what each value is (its kind), checked before anything is written or read, and the old
keyword slots mapped onto it.

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
from typing import Any, Dict, List, Optional, Tuple

import torch

from pyg_dist.loader._base import DistLoader

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
                             f"model=...)")
        owners[entry.key] = found[0]
    return owners


def _listed(value: Any, name: str) -> List[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _check_slot(items: List[Any], value: Any, name: str, ok: Any, what: str) -> None:
    for i, item in enumerate(items):
        if not ok(item):
            where = f"{name}[{i}]" if isinstance(value, (list, tuple)) else name
            raise TypeError(f"checkpoint: {where} must be {what}, got {type(item).__name__}")


def from_keywords(state: Optional[Dict[str, Any]], model: Any = None, optimizer: Any = None,
                  embeddings: Any = (), sparse_optimizers: Any = (), loaders: Any = (),
                  extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``state`` with the old keyword slots added: ``model=m`` is ``{"model": m}``,
    ``optimizer=o`` (or a list) is ``{"optimizer.0": o, ...}``, ``embeddings=e`` is
    ``{"embeddings.<e.name>": e, ...}``, ``sparse_optimizers=s`` is
    ``{"sparse_optimizers.<its tables' names, joined by +>": s, ...}``, ``loaders=l`` is
    ``{"loaders.0": l, ...}`` and ``extra=d`` is ``{"extra": d}``.

    Raises:
        TypeError: naming the slot (and index) holding an object of a wrong kind.
        ValueError: for a key given twice.
    """
    out = dict(state) if state is not None else {}
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"checkpoint: model must be a torch.nn.Module (plain or "
                        f"DistributedDataParallel), got {type(model).__name__}")
    slots = {"model": [model] if model is not None else []}
    for name, value, ok, what in (
            ("optimizer", optimizer, lambda o: isinstance(o, torch.optim.Optimizer),
             "a torch.optim.Optimizer (or a list of them)"),
            ("embeddings", embeddings, lambda o: is_stateful(o) and hasattr(o, "weight"),
             "a pyg_dist DistEmbedding"),
            ("sparse_optimizers", sparse_optimizers,
             lambda o: is_stateful(o) and hasattr(o, "params"),
             "a pyg_dist SparseAdam or SparseAdagrad"),
            ("loaders", loaders, lambda o: isinstance(o, DistLoader),
             "a pyg_dist loader (DistNeighborLoader or DistLinkNeighborLoader)")):
        items = _listed(value, name)
        _check_slot(items, value, name, ok, what)
        slots[name] = items
    for name, items in slots.items():
        for i, item in enumerate(items):
            _add(out, _slot_key(name, i, item), item)
    if extra is not None:
        if not isinstance(extra, dict):
            raise ValueError(f"extra must be a dict, got {type(extra).__name__}")
        if not _is_json(extra):
            raise ValueError(f"extra must be a dict of JSON values, got {extra!r:.200}")
        _add(out, "extra", extra)
    return out


def _slot_key(name: str, index: int, item: Any) -> str:
    """The key of a keyword slot's ``index``-th object: tables by name, sparse optimizers
    by the names of their tables (so a table loads only into the table it was)."""
    if name == "model":
        return name
    if name == "embeddings":
        return f"embeddings.{item.name}"
    if name == "sparse_optimizers":
        return f"sparse_optimizers.{'+'.join(e.name for e in item.params)}"
    return f"{name}.{index}"


def _add(out: Dict[str, Any], key: str, value: Any) -> None:
    if key in out:
        raise ValueError(f"checkpoint: state['{key}'] is given twice (in state= and as a "
                         f"keyword argument)")
    out[key] = value


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
