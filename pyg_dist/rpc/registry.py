"""RPC callees registered by name (never by a counter that must match across processes).

The function sent over the wire is always :func:`dispatch`, referenced by module
path; it looks the callee up by name in the receiving process. Every module that
defines callees is imported by ``pyg_dist/__init__.py``, so importing this module
on the receiving side registers them all.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_CALLEES: Dict[str, Callable[..., Any]] = {}


def callee(name: str) -> Callable[[F], F]:
    """Decorator: registers ``fn`` as the RPC callee ``name``."""
    def register(fn: F) -> F:
        if name in _CALLEES and _CALLEES[name] is not fn:
            raise ValueError(f"an RPC callee named '{name}' is already registered")
        _CALLEES[name] = fn
        return fn
    return register


def lookup(name: str) -> Callable[..., Any]:
    fn = _CALLEES.get(name)
    if fn is None:
        raise KeyError(f"no pyg_dist RPC callee named '{name}' in this process "
                       f"(registered: {sorted(_CALLEES)})")
    return fn


def dispatch(name: str, *args: Any) -> Any:
    """Runs the callee ``name`` with ``args`` (executed on the receiving worker)."""
    import pyg_dist  # noqa: F401  (registers every callee of the package)

    return lookup(name)(*args)
