"""RPC callees registered by name (never by a counter that must match across processes).

The function sent over the wire is always :func:`dispatch`, referenced by module
path; it looks the callee up by name in the receiving process. The registry knows no
callee itself (rpc sits below the layers that define them): the layer that owns a
callee registers it with :func:`callee` when its module is imported, and imports that
module where it starts serving: ``pyg_dist.sampler._serving.CALLEE_MODULES``
(``sampler.hop``, ``sampler.features``, ``sampler.has_edges``,
``sampler.earliest_node``) and
:mod:`pyg_dist.embedding._tensor` (``embedding.read``, ``embedding.write``, defined in
:mod:`pyg_dist.embedding._shards`). A peer only calls a callee on a process
that serves its object, which that process created through the owning layer.

An exception raised by a callee comes back as a :class:`RemoteFailure` *value*, so
the caller can tell "the callee raised ``KeyError``" (re-raised with its type, the
peer named, and the remote traceback) from "the peer died, timed out or is
unreachable" (a transport error).
"""
from __future__ import annotations

import builtins
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, TypeVar

from pyg_dist.errors import PygDistError

F = TypeVar("F", bound=Callable[..., Any])

_CALLEES: Dict[str, Callable[..., Any]] = {}  # name -> callee (its __module__ owns it)
_READ_ONLY: set = set()  # callees that only read partition files (may run on a mapped copy)


class RpcRemoteError(RuntimeError, PygDistError):
    """A callee raised an exception of a type that is not re-created on the caller."""


@dataclass
class RemoteFailure:
    """An exception raised by a callee, as plain data.

    Args:
        kind: the exception's class name.
        message: ``str(exception)``.
        trace: the remote traceback.
    """
    kind: str
    message: str
    trace: str

    def to_exception(self, where: str) -> BaseException:
        """The exception to raise on the caller: the same builtin type when it is one
        (``KeyError``, ``ValueError``, ...), else :class:`RpcRemoteError`."""
        text = (f"{where} raised {self.kind}: {self.message}\n"
                f"--- remote traceback ---\n{self.trace.rstrip()}")
        cls = getattr(builtins, self.kind, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls not in (
                SystemExit, KeyboardInterrupt):
            try:
                return cls(text)
            except TypeError:  # a constructor that takes other arguments
                pass
        return RpcRemoteError(text)


def callee(name: str, reads_partition_only: bool = False) -> Callable[[F], F]:
    """Decorator: registers ``fn`` as the RPC callee ``name``.

    ``reads_partition_only``: the callee reads nothing but the served partition's files
    (topology, stored attributes), so a same-machine caller that mapped the same files
    may run it on its own mapping instead of calling the owner
    (:mod:`pyg_dist.sampler._direct`). Never for writable state such as embeddings.
    """
    def register(fn: F) -> F:
        if name in _CALLEES and _CALLEES[name] is not fn:
            raise ValueError(f"an RPC callee named '{name}' is already registered")
        _CALLEES[name] = fn
        if reads_partition_only:
            _READ_ONLY.add(name)
        return fn
    return register


def reads_partition_only(name: str) -> bool:
    """Whether the callee ``name`` only reads partition files."""
    return name in _READ_ONLY


def lookup(name: str) -> Callable[..., Any]:
    """The callee registered as ``name``; a ``KeyError`` naming the registered ones else."""
    fn = _CALLEES.get(name)
    if fn is None:
        owners = sorted(f"{n} ({f.__module__})" for n, f in _CALLEES.items())
        raise KeyError(f"no pyg_dist RPC callee named '{name}' in this process: the module "
                       f"that defines it was not imported (registered: {owners})")
    return fn


def run_local(name: str, *args: Any) -> Any:
    """Runs the callee ``name`` in this process (its exceptions propagate as they are)."""
    return lookup(name)(*args)


def dispatch(name: str, *args: Any) -> Any:
    """Runs the callee ``name`` with ``args`` (executed on the receiving worker); an
    exception is returned as a :class:`RemoteFailure`."""
    try:
        return run_local(name, *args)
    except Exception as exc:  # travels back as data; the caller raises it
        return RemoteFailure(type(exc).__name__, str(exc), traceback.format_exc())
