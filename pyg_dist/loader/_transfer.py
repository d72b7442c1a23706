"""Finished batches to the loader's device: pinned, then a non-blocking copy.

Where the rows were gathered into the sampler's reused page-locked buffers (a CUDA
device, no sampler workers), pinning the batch copies nothing, and the copy to the GPU
reads those buffers directly. The pool reuses a buffer once nothing holds it, so the
batch's CPU tensors are held here until their non-blocking copy has run.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["DeviceTransfer"]


class DeviceTransfer:
    """Moves batches to ``device`` (pinning them first when ``pin``).

    Args:
        device (torch.device, optional): where batches go (``None``: they stay).
        pin (bool): pin batches before the copy (non-blocking from pinned memory).
    """

    def __init__(self, device: Optional[torch.device], pin: bool) -> None:
        self.device, self.pin = device, pin
        self._copying: Optional[Tuple[Any, List[Tensor]]] = None

    def __call__(self, batch: Any) -> Any:
        """``batch`` pinned and moved (in place, as PyG's ``Data.to`` does)."""
        if self.pin:
            batch = batch.pin_memory()
        if self.device is None:
            return batch
        held = [v for store in batch.stores for v in store.values()
                if isinstance(v, Tensor)] if self.pin else None
        batch = batch.to(self.device, non_blocking=True)
        if held and self.device.type == "cuda":
            self._hold_until_copied(held)
        return batch

    def _hold_until_copied(self, held: List[Tensor]) -> None:
        """Keeps a batch's pinned CPU tensors until their copy has run; lets the previous
        batch's go (its copy finished long ago; waited for if not)."""
        event = torch.cuda.Event()
        event.record()
        previous, self._copying = self._copying, (event, held)
        if previous is not None:
            previous[0].synchronize()
