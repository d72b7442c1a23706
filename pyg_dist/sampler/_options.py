"""Checks of sampling options against a partitioning's ``META.json`` (no RPC), so
every rank refuses the same options with the same one-line error."""
from __future__ import annotations

from typing import Optional

from pyg_dist.format._meta import PartitionMeta
from pyg_dist._typing import edge_key


def check_attr(meta: PartitionMeta, attr: Optional[str], what: str, nodes: bool) -> None:
    """``attr`` must be stored for at least one edge type (or node type if ``nodes``)."""
    if attr is None:
        return
    found = any(attr in a for a in meta.edge_attrs.values())
    found = found or (nodes and any(attr in a for a in meta.node_attrs.values()))
    if not found:
        where = "node or edge" if nodes else "edge"
        raise ValueError(f"{what}='{attr}' is not a stored {where} attribute of this graph")


def check_time(meta: PartitionMeta, attr: Optional[str]) -> None:
    """Every stored ``attr`` must hold one integer time per node (edge), as PyG's
    temporal sampling needs: checked on ``META.json``, so every rank refuses alike."""
    if attr is None:
        return
    specs = [(f"node type '{t}'", a[attr]) for t, a in meta.node_attrs.items() if attr in a]
    specs += [(f"edge type {edge_key(t)!r}", a[attr]) for t, a in meta.edge_attrs.items()
              if attr in a]
    for where, spec in specs:
        if not spec.dtype.startswith(("int", "uint")) or tuple(spec.shape) not in ((), (1,)):
            raise ValueError(f"time_attr='{attr}' must hold one integer time per node or "
                             f"edge: {where} stores {spec.dtype} rows of shape "
                             f"{list(spec.shape)}")
