"""Model and dense optimizer state through ``torch.distributed.checkpoint`` (DCP).

``get_state_dict``/``set_state_dict`` give DCP state dicts of plain modules and of
``DistributedDataParallel`` alike (no ``module.`` prefix), so a checkpoint loads into
either, on any number of ranks (a DDP model is replicated: DCP stores it once).
"""
from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_state_dict,
                                                     set_model_state_dict, set_state_dict)


def _state(model: torch.nn.Module, optimizers: List[torch.optim.Optimizer]) -> Dict[str, Any]:
    if optimizers:
        model_state, optim_state = get_state_dict(model, optimizers)
        return {"model": model_state, "optim": optim_state}
    return {"model": get_model_state_dict(model)}


@contextlib.contextmanager
def _single_process_quiet() -> Iterator[bool]:
    """Yields ``no_dist``; DCP warns on every single-process call, which is intended here."""
    with warnings.catch_warnings():
        if not dist.is_initialized():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield not dist.is_initialized()


def save_dense(folder: Path, model: torch.nn.Module, optimizers: List[torch.optim.Optimizer],
               group: Any) -> None:
    """Collective: writes ``model`` (and ``optimizers``) into the DCP folder ``folder``."""
    with _single_process_quiet() as no_dist:
        dcp.save(_state(model, optimizers), checkpoint_id=str(folder), process_group=group,
                 no_dist=no_dist)


def load_dense(folder: Path, model: torch.nn.Module, optimizers: List[torch.optim.Optimizer],
               group: Any) -> None:
    """Collective: fills ``model`` (and ``optimizers``) from the DCP folder ``folder``."""
    state = _state(model, optimizers)
    with _single_process_quiet() as no_dist:
        dcp.load(state, checkpoint_id=str(folder), process_group=group, no_dist=no_dist)
    if optimizers:
        set_state_dict(model, optimizers, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
    else:
        set_model_state_dict(model, state["model"])
