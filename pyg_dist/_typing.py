"""Type names shared by every module.

Homogeneous graphs are handled as heterogeneous graphs with one node type
(:data:`HOMO_NODE`) and one edge type (:data:`HOMO_EDGE`), so that both share one
code path. Public APIs accept ``None`` for the homogeneous types and translate it
with :func:`node_type_of` / :func:`edge_type_of`.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

NodeType = str
EdgeType = Tuple[str, str, str]

HOMO_NODE: NodeType = "_N"
HOMO_EDGE: EdgeType = ("_N", "_E", "_N")

_SEP = "__"


def edge_key(edge_type: EdgeType) -> str:
    """Returns the string form ``"src__rel__dst"`` of an edge type (used in files)."""
    return _SEP.join(edge_type)


def parse_edge_key(key: str) -> EdgeType:
    """Inverse of :func:`edge_key`."""
    parts = key.split(_SEP)
    if len(parts) != 3:
        raise ValueError(f"'{key}' is not an edge type key of the form 'src__rel__dst'")
    return (parts[0], parts[1], parts[2])


def node_type_of(group: Optional[NodeType]) -> NodeType:
    """Maps ``None`` (a homogeneous graph) to :data:`HOMO_NODE`."""
    return HOMO_NODE if group is None else group


#: PyG's name of a homogeneous graph's edge group (``torch_geometric.distributed``'s
#: feature stores key edge attributes by it)
PYG_HOMO_EDGE = (None, None)


def is_homo_alias(group: object) -> bool:
    """Whether ``group`` is ``None`` or PyG's ``(None, None)`` (a homogeneous graph's
    node or edge group)."""
    return group is None or (isinstance(group, (tuple, list)) and len(group) == 2
                             and group[0] is None and group[1] is None)


def edge_type_of(group: Optional[Union[EdgeType, list]]) -> EdgeType:
    """Maps ``None`` and PyG's ``(None, None)`` (a homogeneous graph) to
    :data:`HOMO_EDGE`."""
    if is_homo_alias(group):
        return HOMO_EDGE
    if isinstance(group, str):
        return parse_edge_key(group)
    if len(group) != 3:
        raise ValueError(f"an edge type is a (src, rel, dst) triple, got {group!r}")
    return (str(group[0]), str(group[1]), str(group[2]))
