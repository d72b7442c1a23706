"""Range partition book: partition ``p`` owns global ids ``[offsets[p], offsets[p+1])``.

Because the partitioner relabels ids so each partition owns one contiguous range,
the whole book is ``num_parts + 1`` integers and an owner lookup is a
``searchsorted``. There is one book per node type and one per edge type.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


class RangeBook:
    """Maps global ids to the partition that owns them.

    Args:
        offsets (Sequence[int]): ``num_parts + 1`` non-decreasing boundaries,
            starting at ``0``; the last one is the total number of ids.
        name (str): what the ids are (used in error messages).
    """

    def __init__(self, offsets: Sequence[int], name: str = "ids") -> None:
        bounds = torch.as_tensor(list(offsets), dtype=torch.long)
        if bounds.numel() < 2 or int(bounds[0]) != 0:
            raise ValueError(f"partition book of {name}: offsets must start at 0 and hold "
                             f"at least two entries, got {list(offsets)}")
        if bool((bounds[1:] < bounds[:-1]).any()):
            raise ValueError(f"partition book of {name}: offsets must be non-decreasing, "
                             f"got {list(offsets)}")
        self.offsets = bounds
        self.name = name
        self._upper = bounds[1:].contiguous()

    @property
    def num_parts(self) -> int:
        return self.offsets.numel() - 1

    @property
    def total(self) -> int:
        return int(self.offsets[-1])

    def start(self, part: int) -> int:
        return int(self.offsets[part])

    def size(self, part: int) -> int:
        return int(self.offsets[part + 1] - self.offsets[part])

    def check(self, ids: Tensor) -> None:
        """Raises :class:`ValueError` if any id is outside ``[0, total)``."""
        if ids.numel() == 0:
            return
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.total:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{self.name}: id {bad} is out of range [0, {self.total})")

    def owner(self, ids: Tensor, check: bool = True) -> Tensor:
        """Returns the partition owning each id (``int64``, same shape as ``ids``)."""
        if check:
            self.check(ids)
        return torch.searchsorted(self._upper, ids, right=True)

    def owns(self, part: int, ids: Tensor) -> Tensor:
        """Returns a boolean mask: which ``ids`` partition ``part`` owns."""
        return (ids >= self.offsets[part]) & (ids < self.offsets[part + 1])

    def to_local(self, part: int, ids: Tensor) -> Tensor:
        """Converts global ids owned by ``part`` into row positions of that partition.

        Raises:
            ValueError: if an id is not owned by ``part``.
        """
        mask = self.owns(part, ids)
        if not bool(mask.all()):
            bad = ids[~mask][:5].tolist()
            raise ValueError(f"{self.name}: partition {part} owns ids "
                             f"[{self.start(part)}, {self.start(part) + self.size(part)}), "
                             f"but was asked for ids it does not own, e.g. {bad}")
        return ids - self.offsets[part]

    def __repr__(self) -> str:
        return f"RangeBook({self.name}, offsets={self.offsets.tolist()})"
