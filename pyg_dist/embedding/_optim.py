"""Sparse optimizers for :class:`DistEmbedding`: gradients travel to the rows' owners.

``step()`` is collective (every rank calls it, in the same order, even with no
gradient). For each embedding:

1. the rank gathers the gradients of its recorded lookups and combines the
   occurrences of each id into ``(id, sum of gradients, number of occurrences)``;
2. one all-to-all (gloo, CPU group) sends each row to its owner rank;
3. the owner adds up what every rank sent for the same id and divides by the total
   number of occurrences: **a row's gradient is the mean over every occurrence of
   its id in this step, on every rank**. The result does not depend on how the
   global batch was split over the ranks, and rows used by several trainers in one
   step are updated once, with nothing lost;
4. the owner updates its rows and their optimizer state (held in
   :class:`DistTensor` s sharded like the embedding), under the shard lock.

A barrier ends the step, so no rank reads rows that an owner is still updating.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.embedding._checkpoint import load_checkpoint, save_checkpoint
from pyg_dist.embedding._embedding import DistEmbedding, PathLike
from pyg_dist.embedding._tensor import DistTensor

Params = Union[DistEmbedding, Iterable[DistEmbedding]]


def combine_duplicates(ids: Tensor, grads: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """Sorted unique ``ids``, the sum of their gradient rows, and occurrence counts."""
    uniq, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
    sums = grads.new_zeros((uniq.numel(), *grads.shape[1:])).index_add_(0, inverse, grads)
    return uniq, sums, counts


def route_gradients(weight: DistTensor, ids: Tensor, grads: Tensor) -> Tuple[Tensor, Tensor]:
    """Collective: sends gradient rows to their owners; returns the global ids this rank
    owns that received a gradient (sorted, unique) and their mean gradient."""
    uniq, sums, counts = combine_duplicates(ids, grads)
    bounds = torch.searchsorted(uniq, torch.as_tensor(weight.layout.offsets))
    sizes = (bounds[1:] - bounds[:-1]).tolist()
    keys = torch.stack([uniq, counts], dim=1)
    got_keys, got_sums = weight.comm.exchange([list(keys.split(sizes)),
                                               list(sums.split(sizes))])
    keys, sums = torch.cat(got_keys), torch.cat(got_sums)
    uniq, inverse = torch.unique(keys[:, 0], return_inverse=True)
    total = sums.new_zeros((uniq.numel(), *sums.shape[1:])).index_add_(0, inverse, sums)
    count = torch.zeros(uniq.numel(), dtype=torch.long).index_add_(0, inverse, keys[:, 1])
    return uniq, total / count.unsqueeze(1).to(total.dtype)


def _number(value: Any, name: str, valid: Callable[[float], bool]) -> float:
    """A saved setting as a float, checked by ``valid``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not valid(value):
        raise ValueError(f"invalid {name}: {value!r}")
    return float(value)


def _check_params(params: Params, who: str) -> List[DistEmbedding]:
    items = [params] if isinstance(params, DistEmbedding) or not isinstance(
        params, Iterable) else list(params)
    for item in items:
        if not isinstance(item, DistEmbedding):
            raise TypeError(f"{who} optimizes pyg_dist DistEmbedding tables, got "
                            f"{type(item).__module__}.{type(item).__name__} (use "
                            f"torch.optim.SparseAdam/Adagrad for a local nn.Embedding)")
    if not items:
        raise ValueError(f"{who} got an empty list of embeddings")
    names = [emb.name for emb in items]
    if len(set(names)) != len(names):
        raise ValueError(f"{who} got the same DistEmbedding twice: {names}")
    return items


class SparseOptimizer:
    """Base class: routes gradients home and updates rows at their owner.

    Subclasses name their per-row state (:attr:`state_names`) and implement
    :meth:`update`. Creation is collective (the state tensors are created).

    Args:
        params (DistEmbedding or Iterable[DistEmbedding]): the tables to train.
        lr (float): learning rate.
    """
    state_names: Tuple[str, ...] = ()

    def __init__(self, params: Params, lr: float) -> None:
        self.params = _check_params(params, type(self).__name__)
        if not lr > 0:
            raise ValueError(f"{type(self).__name__}: lr must be positive, got {lr}")
        self.lr = float(lr)
        self.state: Dict[str, Dict[str, DistTensor]] = {
            emb.name: {s: self._state_tensor(emb, s) for s in self.state_names}
            for emb in self.params}

    def _state_tensor(self, emb: DistEmbedding, state: str) -> DistTensor:
        """A zero-initialised state tensor with the embedding's rows and layout."""
        shape = self.state_shape(emb, state)
        dtype = torch.long if state == "step" else emb.weight.dtype
        return DistTensor(shape, dtype, name=f"{emb.name}.{type(self).__name__}.{state}",
                          partition=emb.weight.partition)

    def state_shape(self, emb: DistEmbedding, state: str) -> Tuple[int, ...]:
        return (emb.num_embeddings, emb.embedding_dim)

    def hyper_parameters(self) -> Dict[str, Any]:
        """The settings saved with the state (JSON-serialisable)."""
        return {"lr": self.lr}

    def parse_hyper_parameters(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """Checked attribute values from saved settings (see :meth:`hyper_parameters`).

        Raises:
            KeyError, TypeError, ValueError: if a setting is missing or invalid.
        """
        return {"lr": _number(config["lr"], "lr", lambda x: x > 0)}

    def apply_hyper_parameters(self, values: Dict[str, Any]) -> None:
        """Sets attributes returned by :meth:`parse_hyper_parameters`."""
        for key, value in values.items():
            setattr(self, key, value)

    def set_hyper_parameters(self, config: Dict[str, Any]) -> None:
        self.apply_hyper_parameters(self.parse_hyper_parameters(config))

    def zero_grad(self) -> None:
        """Clears the gradients of recorded lookups (see :meth:`DistEmbedding.zero_grad`)."""
        for emb in self.params:
            emb.zero_grad()

    @torch.no_grad()
    def step(self) -> None:
        """Applies the recorded gradients (collective: every rank calls it)."""
        for emb in self.params:
            ids, grads = emb.gradients()
            rows, grad = route_gradients(emb.weight, ids, grads)
            if rows.numel():
                local = rows - emb.weight.local_range[0]
                state = {s: t.local_data for s, t in self.state[emb.name].items()}
                with emb.weight.lock:
                    self.update(emb.weight.local_data, state, local, grad)
            emb.mark_stepped()
        self.params[0].weight.comm.barrier()

    def update(self, weight: Tensor, state: Dict[str, Tensor], rows: Tensor,
               grad: Tensor) -> None:
        """Updates ``weight[rows]`` and ``state[...][rows]`` in place (owner side).

        Args:
            weight: this rank's rows of the table.
            state: this rank's rows of each state tensor.
            rows: unique local row positions.
            grad: their gradients.
        """
        raise NotImplementedError

    # ---- checkpoints ---------------------------------------------------------------
    def state_tensors(self) -> Dict[str, DistTensor]:
        """The per-row state, keyed ``"<embedding name>/<state name>"``."""
        return {f"{name}/{s}": t for name, states in self.state.items()
                for s, t in states.items()}

    def state_dict(self) -> Dict[str, Any]:
        """The Stateful form :mod:`pyg_dist.checkpoint` saves: the tables' names, the
        hyper-parameters and the per-row state (sharded, saved by global row)."""
        return {"params": [e.name for e in self.params],
                "hyper_parameters": self.hyper_parameters(),
                "state": {name: dict(states) for name, states in self.state.items()}}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores the hyper-parameters from ``state_dict`` (as :mod:`pyg_dist.checkpoint`
        fills it: its per-row state tensors are this optimizer's own, filled in place).

        Raises:
            ValueError: naming what differs (other tables, bad hyper-parameters, state
                tensors that are not this optimizer's).
        """
        if not isinstance(state_dict, dict) or \
                set(state_dict) != {"params", "hyper_parameters", "state"}:
            raise ValueError(f"{type(self).__name__}.load_state_dict: expected params, "
                             f"hyper_parameters and state")
        names = [e.name for e in self.params]
        if state_dict["params"] != names:
            raise ValueError(f"{type(self).__name__} of tables {names} cannot load the state "
                             f"of one of tables {state_dict['params']!r}")
        given = state_dict["state"]
        if not isinstance(given, dict) or set(given) != set(self.state) or any(
                not isinstance(given[n], dict) or set(given[n]) != set(states)
                or any(given[n][s] is not t for s, t in states.items())
                for n, states in self.state.items()):
            raise ValueError(f"{type(self).__name__}.load_state_dict: the per-row state must "
                             f"be this optimizer's own tensors, filled in place")
        hyper = state_dict["hyper_parameters"]
        try:
            values = self.parse_hyper_parameters(hyper)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad {type(self).__name__} hyper-parameters {hyper!r} "
                             f"({exc})") from None
        self.apply_hyper_parameters(values)

    def save(self, path: PathLike) -> None:
        """Saves the optimizer state (by global id) and hyper-parameters, atomically,
        into the checkpoint folder ``path`` (collective): :func:`pyg_dist.embedding.
        save_checkpoint` with this optimizer alone."""
        save_checkpoint(path, optimizers=[self])

    def load(self, path: PathLike) -> None:
        """Restores state and hyper-parameters from a checkpoint holding them (saved by
        :meth:`save` or :func:`~pyg_dist.embedding.save_checkpoint`), on any number of
        ranks (collective)."""
        load_checkpoint(path, optimizers=[self])

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.hyper_parameters().items())
        return f"{type(self).__name__}({[e.name for e in self.params]}, {params})"


class SparseAdagrad(SparseOptimizer):
    """Adagrad over rows: ``state += g²; w -= lr * g / (sqrt(state) + eps)``.

    Args:
        params (DistEmbedding or Iterable[DistEmbedding]): the tables to train.
        lr (float): learning rate.
        eps (float): added to the denominator. (default: ``1e-10``)
    """
    state_names = ("sum",)

    def __init__(self, params: Params, lr: float, eps: float = 1e-10) -> None:
        if not eps >= 0:
            raise ValueError(f"SparseAdagrad: eps must be >= 0, got {eps}")
        self.eps = float(eps)
        super().__init__(params, lr)

    def hyper_parameters(self) -> Dict[str, Any]:
        return {"lr": self.lr, "eps": self.eps}

    def parse_hyper_parameters(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return {**super().parse_hyper_parameters(config),
                "eps": _number(config["eps"], "eps", lambda x: x >= 0)}

    def update(self, weight: Tensor, state: Dict[str, Tensor], rows: Tensor,
               grad: Tensor) -> None:
        total = state["sum"].index_select(0, rows).addcmul_(grad, grad)
        state["sum"].index_copy_(0, rows, total)
        weight.index_add_(0, rows, grad / total.sqrt_().add_(self.eps), alpha=-self.lr)


class SparseAdam(SparseOptimizer):
    """Adam over rows, each row with its own step count (bias correction by it):
    ``m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
    w -= lr · m̂ / (sqrt(v̂) + eps)`` with ``m̂ = m / (1 - β1^t)``, ``v̂ = v / (1 - β2^t)``.

    Args:
        params (DistEmbedding or Iterable[DistEmbedding]): the tables to train.
        lr (float): learning rate.
        betas (Tuple[float, float]): decay of the moment estimates.
            (default: ``(0.9, 0.999)``)
        eps (float): added to the denominator. (default: ``1e-8``)
    """
    state_names = ("step", "m", "v")

    def __init__(self, params: Params, lr: float, betas: Sequence[float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        betas = tuple(float(b) for b in betas)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"SparseAdam: betas must be two values in [0, 1), got {betas}")
        if not eps >= 0:
            raise ValueError(f"SparseAdam: eps must be >= 0, got {eps}")
        self.betas: Tuple[float, float] = (betas[0], betas[1])
        self.eps = float(eps)
        super().__init__(params, lr)

    def state_shape(self, emb: DistEmbedding, state: str) -> Tuple[int, ...]:
        if state == "step":
            return (emb.num_embeddings,)
        return (emb.num_embeddings, emb.embedding_dim)

    def hyper_parameters(self) -> Dict[str, Any]:
        return {"lr": self.lr, "betas": list(self.betas), "eps": self.eps}

    def parse_hyper_parameters(self, config: Dict[str, Any]) -> Dict[str, Any]:
        betas = config["betas"]
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise ValueError(f"betas must be two numbers, got {betas!r}")
        return {**super().parse_hyper_parameters(config),
                "eps": _number(config["eps"], "eps", lambda x: x >= 0),
                "betas": tuple(_number(b, "betas", lambda x: 0.0 <= x < 1.0) for b in betas)}

    def update(self, weight: Tensor, state: Dict[str, Tensor], rows: Tensor,
               grad: Tensor) -> None:
        b1, b2 = self.betas
        step = state["step"].index_select(0, rows).add_(1)
        state["step"].index_copy_(0, rows, step)
        m = state["m"].index_select(0, rows).mul_(b1).add_(grad, alpha=1 - b1)
        v = state["v"].index_select(0, rows).mul_(b2).addcmul_(grad, grad, value=1 - b2)
        state["m"].index_copy_(0, rows, m)
        state["v"].index_copy_(0, rows, v)
        t = step.to(torch.float64).unsqueeze(1)  # bias corrections in double precision
        m_hat = m.div_((1 - torch.pow(b1, t)).to(grad.dtype))
        v_hat = v.div_((1 - torch.pow(b2, t)).to(grad.dtype))
        weight.index_add_(0, rows, m_hat.div_(v_hat.sqrt_().add_(self.eps)), alpha=-self.lr)
