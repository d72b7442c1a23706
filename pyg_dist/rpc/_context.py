"""``DistContext``: who this process is in the job, read from torchrun's environment."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, List, Mapping, Optional

DEFAULT_RPC_TIMEOUT_S = 120.0


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    value = env.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(f"environment variable {key}={value!r} is not an integer") from exc


@dataclass(frozen=True)
class DistContext:
    """This process's place in a distributed job.

    Ranks are assigned to partitions in contiguous blocks: with ``world_size``
    trainers and ``num_parts`` partitions, ranks ``[p * k, (p + 1) * k)`` serve
    partition ``p`` where ``k = world_size // num_parts`` (so one ``torchrun`` per
    machine with ``--nproc-per-node=k`` loads partition ``node_rank``).

    The first five fields are ``torch_geometric.distributed``'s, in its order:
    ``DistContext(rank, global_rank, world_size, global_world_size, group_name)``
    positionally works as there; pass the others by name.

    Args:
        rank (int): global rank (``RANK``).
        world_size (int): number of trainer processes (``WORLD_SIZE``).
        local_rank (int): rank on this machine (``LOCAL_RANK``).
        local_world_size (int): trainers on this machine (``LOCAL_WORLD_SIZE``).
        group_rank (int): machine (node) rank (``GROUP_RANK``).
        master_addr (str): rendezvous host (``MASTER_ADDR``).
        master_port (int): rendezvous port (``MASTER_PORT``).
        rpc_timeout (float): seconds before an RPC to a peer is declared failed; the
            job's timeout for every wait.
        global_rank, global_world_size, group_name, role: accepted for scripts written
            for ``torch_geometric.distributed``. pyg_dist has one group of trainers, so
            the global values must equal ``rank`` / ``world_size``; ``group_name``
            names :attr:`worker_name`, and ``role`` is informative (RPC groups are
            named by pyg_dist).
        direct_reads (bool, optional): read other partitions' files directly when
            their owner runs on this machine and mapped them
            (:mod:`pyg_dist.sampler._direct`); ``None`` (default): on unless
            ``PYG_DIST_DIRECT_READS=0``.
        restart_count (int): how many times torchrun restarted this machine's workers
            (``TORCHELASTIC_RESTART_COUNT``); informative (logs, resuming).
        incarnation (str, optional): the id the job's ranks agreed on for this round of
            workers (:mod:`pyg_dist.rpc._incarnation`); every key pyg_dist keeps in the
            rendezvous store is scoped to it. ``None`` until agreed: trainers agree on
            it when they join, sampler workers inherit their trainer's.
    """
    rank: int = 0
    global_rank: Optional[int] = None
    world_size: int = 1
    global_world_size: Optional[int] = None
    group_name: str = ""
    role: Optional[object] = None
    local_rank: int = 0
    local_world_size: int = 1
    group_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT_S
    direct_reads: Optional[bool] = None
    restart_count: int = 0
    incarnation: Optional[str] = None

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in [0, world_size={self.world_size})")
        for name, value, ours in (("global_rank", self.global_rank, self.rank),
                                  ("global_world_size", self.global_world_size,
                                   self.world_size)):
            if value is not None and value != ours:
                raise ValueError(
                    f"DistContext: {name}={value} differs from {name.replace('global_', '')}"
                    f"={ours}; pyg_dist has one group of trainer processes, so a trainer's "
                    f"rank and world size are its global ones")
        if self.rpc_timeout <= 0:
            raise ValueError(f"rpc_timeout must be positive, got {self.rpc_timeout}")

    @classmethod
    def from_env(cls, rpc_timeout: Optional[float] = None,
                 env: Optional[Mapping[str, str]] = None) -> "DistContext":
        """Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
        ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` and
        ``TORCHELASTIC_RESTART_COUNT`` (as set by ``torchrun``).

        Without them (a plain ``python script.py``) the context is a single process:
        rank 0 of 1, no RPC. ``PYG_DIST_RPC_TIMEOUT`` sets the RPC timeout.
        """
        env = os.environ if env is None else env
        world = _env_int(env, "WORLD_SIZE", 1)
        local_world = _env_int(env, "LOCAL_WORLD_SIZE", world)
        timeout = rpc_timeout if rpc_timeout is not None else float(
            env.get("PYG_DIST_RPC_TIMEOUT", DEFAULT_RPC_TIMEOUT_S))
        return cls(rank=_env_int(env, "RANK", 0), world_size=world,
                   local_rank=_env_int(env, "LOCAL_RANK", 0), local_world_size=local_world,
                   group_rank=_env_int(env, "GROUP_RANK", 0),
                   master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                   master_port=_env_int(env, "MASTER_PORT", 29500), rpc_timeout=timeout,
                   restart_count=_env_int(env, "TORCHELASTIC_RESTART_COUNT", 0))

    @property
    def worker_name(self) -> str:
        """``"<group_name>-<rank>"``, as ``torch_geometric.distributed`` names a process
        (pyg_dist's RPC workers have names of their own, e.g. ``trainers0-<rank>``)."""
        return f"{self.group_name}-{self.rank}"

    def with_timeout(self, rpc_timeout: float) -> "DistContext":
        return replace(self, rpc_timeout=rpc_timeout)

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def _per_part(self, num_parts: int) -> int:
        if num_parts < 1 or self.world_size % num_parts != 0:
            raise ValueError(f"world_size={self.world_size} trainers cannot be spread evenly over "
                             f"{num_parts} partition(s): use a multiple of {num_parts} processes")
        return self.world_size // num_parts

    def partition_of(self, rank: int, num_parts: int) -> int:
        """The partition served by ``rank``."""
        return rank // self._per_part(num_parts)

    def partition_id(self, num_parts: int) -> int:
        """The partition this process loads and serves."""
        return self.partition_of(self.rank, num_parts)

    def ranks_of(self, part: int, num_parts: int) -> List[int]:
        """The ranks that serve partition ``part``."""
        k = self._per_part(num_parts)
        return list(range(part * k, (part + 1) * k))


def check_context(value: Any, name: str = "current_ctx") -> Optional[DistContext]:
    """``value`` if it is a :class:`DistContext` or ``None``.

    Raises:
        TypeError: naming the argument ``name``, for anything else.
    """
    if value is not None and not isinstance(value, DistContext):
        raise TypeError(f"{name} must be a pyg_dist.DistContext (or None: read from "
                        f"torchrun's environment), got {type(value).__name__} "
                        f"{repr(value)[:60]}")
    return value
