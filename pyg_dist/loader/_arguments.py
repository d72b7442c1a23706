"""Checks of the loaders' shared keyword arguments: each bad value is a one-line error
naming the argument, what it must be, and what was given (raised on every rank by the
loader's agreement, like its other errors)."""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from pyg_dist.sampler._cache.feature_cache import check_budget


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}"


def check_flag(name: str, value: Any, optional: bool = False) -> None:
    """``value`` must be a ``bool`` (or ``None`` with ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False{' (or None)' if optional else ''}, "
                        f"got {_shown(value)}")


def check_name(name: str, value: Any) -> None:
    """``value`` must be ``None`` or a ``str`` (an attribute's name)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be an attribute name (str) or None, got {_shown(value)}")


def check_tensor(name: str, value: Any) -> None:
    """``value`` must be ``None`` or a tensor (per-seed values such as times or labels)."""
    if value is not None and not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a tensor with one entry per seed, or None, got "
                        f"{_shown(value)}")


def check_pair(name: str, times: Any, time_attr: Any) -> None:
    """Seed times ``times`` (``input_time``, ``edge_label_time``) need ``time_attr``, as
    in PyG's loaders (without it they would be ignored)."""
    if times is not None and time_attr is None:
        raise ValueError(f"Received conflicting '{name}' and 'time_attr' arguments: "
                         f"'{name}' is set while 'time_attr' is not set")


def check_ratio(name: str, value: Any) -> None:
    """``value`` must be ``None`` or a finite number > 0 (a number of negatives per
    positive: inf or nan would size no array)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or not value > 0:
        raise ValueError(f"{name} must be a number > 0 and finite, got {value!r}")


def check_device(value: Any) -> Optional[torch.device]:
    """``value`` as a ``torch.device`` (``None`` stays ``None``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, torch.device)):
        raise TypeError(f"device must be a torch.device, a device name such as 'cuda:0', "
                        f"or None, got {_shown(value)}")
    try:
        return torch.device(value)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"device={value!r} is not a device: {exc}") from None


def check_loader_options(shuffle: Any, drop_last: Any, replace: Any, disjoint: Any,
                         even_batches: Any, pin_memory: Any, seed: Any, feature_cache: Any,
                         transform: Any, device: Any, time_attr: Any,
                         weight_attr: Any) -> None:
    """Checks the options of :class:`~pyg_dist.loader._base.DistLoader` that its other
    steps would use unchecked (sizes, sampling options and seeds are checked where they
    are used).

    Raises:
        TypeError: an argument of the wrong type, named.
        ValueError: an argument out of its range, named.
    """
    for name, value in (("shuffle", shuffle), ("drop_last", drop_last),
                        ("replace", replace), ("disjoint", disjoint),
                        ("even_batches", even_batches)):
        check_flag(name, value)
    check_flag("pin_memory", pin_memory, optional=True)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an integer, got {_shown(seed)}")
    check_budget(feature_cache)
    if transform is not None and not callable(transform):
        raise TypeError(f"transform must be a callable taking and returning a batch, or "
                        f"None, got {_shown(transform)}")
    check_device(device)
    check_name("time_attr", time_attr)
    check_name("weight_attr", weight_attr)


def check_sizes(batch_size: int, num_workers: int, concurrency: int) -> None:
    """``batch_size`` and ``concurrency`` must be integers >= 1, ``num_workers`` >= 0."""
    for name, value, low in (("batch_size", batch_size, 1), ("num_workers", num_workers, 0),
                             ("concurrency", concurrency, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
