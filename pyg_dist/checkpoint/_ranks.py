"""This process's rank, the job's size, and the one exchange that makes an error on any
rank raise on every rank (naming the rank)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Optional

import torch.distributed as dist

from pyg_dist.rpc import _runtime as runtime
from pyg_dist.rpc._agreement import exchange


@dataclass
class Ranks:
    """This process's rank, the job's size and the gloo group of collectives."""
    rank: int
    world_size: int
    group: Any = None

    @classmethod
    def current(cls) -> "Ranks":
        group = runtime.current().cpu_group if runtime.is_initialized() else None
        if dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), group)
        return cls(0, 1, None)

    def gather(self, error: Optional[BaseException], value: Any, what: str) -> List[Any]:
        """Every rank's ``value``; raises on every rank if ``what`` failed on any (a peer
        that died or stays silent is a ``PeerFailedError`` naming it, after the group's
        timeout)."""
        message = None if error is None else f"{type(error).__name__}: {error}"
        gathered = exchange((message, value), what, self.world_size, self.group)
        if error is not None:
            raise error
        failed = [f"rank {r}: {m}" for r, (m, _) in enumerate(gathered) if m is not None]
        if failed:
            raise RuntimeError(f"{what} failed on {len(failed)} other rank(s):\n"
                               + "\n".join(failed))
        return [v for _, v in gathered]


def restarts() -> int:
    """torchrun restarts of this job so far (``TORCHELASTIC_RESTART_COUNT``)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def same_everywhere(specs: List[Any], verb: str) -> None:
    """Raises the same ``ValueError`` on every rank, naming the keys whose kind differs
    between ranks, unless every rank passed the same ``(key, kind, class)`` list."""
    if all(s == specs[0] for s in specs):
        return
    keys = sorted({k for spec in specs for k in spec} - set.intersection(*map(set, specs)))
    names = sorted({k[0] for k in keys})
    seen = "; ".join(f"rank {r}: " + ", ".join(f"{k}={kind} {cls}".rstrip()
                                              for k, kind, cls in spec if k in names)
                     for r, spec in enumerate(specs))
    raise ValueError(f"checkpoint.{verb}: state differs between ranks in {names} ({seen}): "
                     f"every rank must pass the same keys and kinds")
