"""Who takes part in distributed tensors, and the collectives they use.

Distributed tensors live in the trainers' RPC group (:func:`pyg_dist.init_rpc`):
reads and writes of remote rows are RPCs, one request per owner rank; optimizer
steps, creation and checkpoints are gloo collectives on the group's CPU process
group, entered by every rank even with nothing to send. Without an RPC group and
with ``WORLD_SIZE`` unset or ``1`` everything runs in this process (standalone).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist.rpc import _health as health, _runtime as runtime
from pyg_dist.rpc._agreement import PeerFailedError, exchange
from pyg_dist.rpc._context import DistContext
from pyg_dist.rpc._runtime import RpcGroup

STANDALONE = "standalone"


@dataclass(frozen=True)
class Comm:
    """This process's view of the ranks sharing distributed tensors.

    Args:
        rank (int): this process's rank.
        world_size (int): number of ranks sharing the tensors.
        group (RpcGroup, optional): the RPC group (``None`` in standalone mode).
    """
    rank: int
    world_size: int
    group: Optional[RpcGroup] = None

    @classmethod
    def current(cls) -> "Comm":
        """The ranks of the RPC group this process joined, or a standalone process.

        Raises:
            RuntimeError: in a multi-process job that did not call ``init_rpc``.
        """
        if runtime.is_initialized():
            group = runtime.current()
            if group.world_size > 1 and not dist.is_initialized():
                raise RuntimeError(
                    f"distributed tensors need the trainers' process group, but RPC group "
                    f"'{group.name}' has none: create them in the trainer processes")
            return cls(group.rank, group.world_size, group)
        ctx = DistContext.from_env()
        if ctx.world_size > 1:
            raise RuntimeError(
                f"this is rank {ctx.rank} of {ctx.world_size} but pyg_dist RPC is not "
                f"initialised: call pyg_dist.init_rpc() "
                f"on every rank before creating distributed tensors")
        return cls(0, 1, None)

    @property
    def namespace(self) -> str:
        """Named tensors are unique within one RPC group (or standalone process)."""
        return self.group.name if self.group is not None else STANDALONE

    @property
    def _pg(self) -> Any:
        return self.group.cpu_group if self.group is not None else None

    def all_gather_object(self, obj: Any) -> List[Any]:
        """Every rank's ``obj``, by rank (collective; a failure names lost peers)."""
        return exchange(obj, "a distributed-tensor collective", self.world_size, self._pg)

    def agree(self, error: Optional[BaseException], what: str) -> None:
        """Collective: every rank learns whether ``what`` failed on any rank.

        Args:
            error: this rank's failure, or ``None`` if it succeeded.
            what: the operation (used in the message).

        Raises:
            the rank's own ``error`` where it failed, and :class:`RuntimeError`
            naming the failed rank(s) on the others.
        """
        message = None if error is None else f"{type(error).__name__}: {error}"
        errors = self.all_gather_object(message)
        if error is not None:
            raise error
        failed = [f"rank {r}: {e}" for r, e in enumerate(errors) if e is not None]
        if failed:
            raise RuntimeError(f"{what} failed on {len(failed)} other rank(s):\n"
                               + "\n".join(failed))

    def barrier(self) -> None:
        if self.world_size > 1:
            with _naming_peers("a distributed-tensor barrier"):
                dist.barrier(group=self._pg)

    def exchange(self, chunks: Sequence[List[Tensor]]) -> List[List[Tensor]]:
        """All-to-all of several tensors sharing row counts (collective).

        Args:
            chunks: for each tensor kind, ``world_size`` pieces; piece ``r`` is sent to
                rank ``r``. Pieces of different kinds sent to the same rank must have
                the same number of rows. Empty pieces are fine.

        Returns:
            for each tensor kind, the ``world_size`` pieces received, by source rank.
        """
        if self.world_size == 1:
            return [list(kind) for kind in chunks]
        send = torch.tensor([piece.shape[0] for piece in chunks[0]], dtype=torch.long)
        recv = torch.empty_like(send)
        with _naming_peers("a distributed-tensor all-to-all"):
            dist.all_to_all_single(recv, send, group=self._pg)
            send_sizes, recv_sizes = send.tolist(), recv.tolist()
            received = []
            for kind in chunks:
                inp = torch.cat(kind).contiguous()
                out = inp.new_empty((sum(recv_sizes), *inp.shape[1:]))
                dist.all_to_all_single(out, inp, recv_sizes, send_sizes, group=self._pg)
                received.append(list(out.split(recv_sizes)))
        return received


@contextmanager
def _naming_peers(what: str) -> Iterator[None]:
    """Re-raises a failed collective as :class:`PeerFailedError` naming the peers the
    health watchdog knows to be silent or failed."""
    try:
        yield
    except RuntimeError as exc:
        raise PeerFailedError(health.with_diagnosis(f"{what} failed ({exc})")) from exc
