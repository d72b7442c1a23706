"""A loader's position as a small dict of plain values (``state_dict``), checked on load.

The position is ``(epoch, batch)``: the epoch whose batches are being yielded and how
many of them were already handed out. With it come the values that decide which
batches an epoch holds (seed, shuffle, batch size, batch count, the rank's seeds), so
a state from a loader with other options, other seeds or another world size is
refused with an error naming the field, instead of resuming somewhere else.

Nothing else is needed to resume exactly: the shuffle of an epoch is seeded by
``seed + epoch`` and every random draw of a batch by ``(seed, epoch, batch, rank)``
(:class:`~pyg_dist.loader._producer.BatchTask`), never by a stream that advances.
"""
from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Mapping

import numpy as np
from torch import Tensor

VERSION = 1
#: the largest epoch a state may hold: ``seed + epoch`` seeds torch's generator (64 bits)
MAX_EPOCH = 2 ** 48
_INT64 = 2 ** 63


@dataclass(frozen=True)
class LoaderState:
    """The position of a :class:`~pyg_dist.loader._base.DistLoader` and what it depends on.

    Args:
        version: format version (:data:`VERSION`).
        kind: ``"node"`` or ``"link"``.
        epoch: the epoch the next batch belongs to.
        batch: batches of ``epoch`` already yielded (``0 <= batch < num_batches``).
        num_batches: batches per epoch on every rank.
        batch_size, shuffle, drop_last, seed: the loader's options.
        num_seeds: seeds this rank holds.
        seeds_digest: CRC-32 of this rank's seed ids.
        options_digest: CRC-32 of the sampling options.
        world_size, rank: where the state was taken.
    """
    version: int
    kind: str
    epoch: int
    batch: int
    num_batches: int
    batch_size: int
    shuffle: bool
    drop_last: bool
    seed: int
    num_seeds: int
    seeds_digest: int
    options_digest: int
    world_size: int
    rank: int

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: Any, what: str = "loader state") -> "LoaderState":
        """Checks keys, types and ranges; raises ``ValueError`` naming the field."""
        if not isinstance(state, Mapping):
            raise ValueError(f"{what} must be a dict, got {type(state).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in state]
        extra = [k for k in state if k not in names]
        if missing or extra:
            raise ValueError(f"{what}: missing field(s) {missing}, unknown field(s) {extra}")
        for f in fields(cls):
            value, kind = state[f.name], (str if f.type == "str" else
                                          bool if f.type == "bool" else int)
            ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
            if not ok:
                raise ValueError(f"{what}: field '{f.name}' must be {kind.__name__}, got "
                                 f"{type(value).__name__} {value!r}")
        out = cls(**{n: state[n] for n in names})
        out._check_ranges(what)
        return out

    def _check_ranges(self, what: str) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) \
                    and not -_INT64 <= value < _INT64:
                raise ValueError(f"{what}: field '{f.name}' must fit in 64 bits, got {value}")
        if self.version != VERSION:
            raise ValueError(f"{what}: field 'version' is {self.version}, this pyg_dist "
                             f"reads version {VERSION}")
        if self.kind not in ("node", "link"):
            raise ValueError(f"{what}: field 'kind' must be 'node' or 'link', got {self.kind!r}")
        for name in ("epoch", "num_batches", "num_seeds", "rank"):
            if getattr(self, name) < 0:
                raise ValueError(f"{what}: field '{name}' must be >= 0, got "
                                 f"{getattr(self, name)}")
        for name in ("batch_size", "world_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{what}: field '{name}' must be >= 1, got "
                                 f"{getattr(self, name)}")
        if self.epoch >= MAX_EPOCH:
            raise ValueError(f"{what}: field 'epoch' must be < 2**48, got {self.epoch}")
        if not 0 <= self.batch < max(self.num_batches, 1):
            raise ValueError(f"{what}: field 'batch' must be in [0, {self.num_batches}) "
                             f"(num_batches), got {self.batch}")
        if self.rank >= self.world_size:
            raise ValueError(f"{what}: field 'rank' ({self.rank}) must be < world_size "
                             f"({self.world_size})")

    def check_matches(self, mine: "LoaderState", what: str = "loader state") -> None:
        """Raises ``ValueError`` when this state was taken from a loader that yields other
        batches than ``mine`` (the loader loading it), naming the first field that differs.
        """
        if (self.world_size, self.rank) != (mine.world_size, mine.rank):
            raise ValueError(
                f"{what} was saved by rank {self.rank} of {self.world_size}, this loader is "
                f"rank {mine.rank} of {mine.world_size}: positions within an epoch do not "
                f"map to another world size (pyg_dist.checkpoint.load resumes such jobs at "
                f"the start of the next epoch)")
        for name in ("kind", "batch_size", "shuffle", "drop_last", "seed", "num_seeds",
                     "num_batches", "seeds_digest", "options_digest"):
            if getattr(self, name) != getattr(mine, name):
                raise ValueError(f"{what} comes from a loader with other batches: field "
                                 f"'{name}' is {getattr(self, name)!r} there and "
                                 f"{getattr(mine, name)!r} here")

    def next_epoch(self) -> int:
        """The first epoch that starts from its beginning at or after this position."""
        return self.epoch + (1 if self.batch > 0 else 0)


def digest(value: Any) -> int:
    """CRC-32 of a tensor's bytes (or of ``repr`` of anything else)."""
    if isinstance(value, Tensor):
        data = np.ascontiguousarray(value.detach().cpu().numpy()).tobytes()
        return zlib.crc32(data + repr((value.dtype, tuple(value.shape))).encode())
    return zlib.crc32(repr(value).encode())
