"""Fewer bytes per row on the wire: float32 attributes sent as bfloat16 or float16.

Off by default. With ``wire_dtype`` set, a peer casts the float32 rows it sends to the
chosen type (round to nearest even, as ``Tensor.to`` does) and the fetcher casts them
back to float32 as it copies them into the batch: every remote value equals the owner's
float32 value rounded to that type; local rows, rows read directly from a partition
on the same machine and rows of the feature cache are never rounded. Half the bytes
per row; bfloat16 keeps float32's range (3 significant digits), float16 keeps more
digits (11 bits) but overflows beyond 65504.

``wire_dtype`` is one of:

- ``None``: send rows as stored;
- a type (``torch.bfloat16``, ``torch.float16`` or their names ``"bfloat16"``/
  ``"bf16"``, ``"float16"``/``"fp16"``/``"half"``): every float32 attribute of every
  node and edge type;
- a dict from attribute name (any type's attribute of that name) or ``(type, name)``
  to one of those (``None`` leaves that attribute as stored).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._typing import EdgeType, NodeType

Group = Union[NodeType, EdgeType]
WireType = Union[None, str, torch.dtype]
WireSpec = Union[WireType, Mapping[Union[str, Tuple[Group, str]], WireType]]
# per (kind, group): attribute -> name of the type it travels as
WirePlan = Dict[Tuple[str, Group], Dict[str, str]]

_NAMES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16",
          "fp16": "float16", "half": "float16"}
WIRE_TYPES = ("bfloat16", "float16")


def wire_name(value: WireType) -> Optional[str]:
    """The canonical name of a wire type (``None`` for none); raises on anything else."""
    if value is None:
        return None
    if isinstance(value, torch.dtype):
        value = str(value).replace("torch.", "")
    name = _NAMES.get(str(value).lower()) if isinstance(value, (str, torch.dtype)) else None
    if name is None:
        raise ValueError(f"wire_dtype must be bfloat16 or float16 (or None), got {value!r}")
    return name


def normalize(spec: WireSpec) -> Union[None, str, Dict[Union[str, Tuple[Group, str]], str]]:
    """``spec`` with its types as canonical names (picklable, comparable across ranks)."""
    if spec is None or spec is False:
        return None
    if isinstance(spec, Mapping):
        out = {key: wire_name(value) for key, value in spec.items()}
        return {k: v for k, v in out.items() if v is not None} or None
    return wire_name(spec)


def plan(spec: WireSpec, node_attrs: Mapping[NodeType, List[str]],
         edge_attrs: Mapping[EdgeType, List[str]],
         layout: Callable[[str, Group, str], Tuple[Tuple[int, ...], torch.dtype]]) -> WirePlan:
    """Which attribute of which type travels as which type.

    Raises:
        ValueError: naming an attribute that is not fetched, or one that is not float32
            but was named explicitly.
    """
    spec = normalize(spec)
    if spec is None:
        return {}
    fetched = [("nodes", t, a) for t, attrs in node_attrs.items() for a in attrs]
    fetched += [("edges", t, a) for t, attrs in edge_attrs.items() for a in attrs]
    out: WirePlan = {}
    if isinstance(spec, str):  # every float32 attribute
        for kind, group, attr in fetched:
            if layout(kind, group, attr)[1] == torch.float32:
                out.setdefault((kind, group), {})[attr] = spec
        return out
    used = set()
    for kind, group, attr in fetched:
        key = (group, attr) if (group, attr) in spec else attr if attr in spec else None
        if key is None:
            continue
        used.add(key)
        dtype = layout(kind, group, attr)[1]
        if dtype != torch.float32:
            raise ValueError(f"wire_dtype: attribute '{attr}' of {group!r} is {dtype}; only "
                             f"float32 attributes can travel as {spec[key]}")
        out.setdefault((kind, group), {})[attr] = spec[key]
    unknown = [k for k in spec if k not in used]
    if unknown:
        raise ValueError(f"wire_dtype names attributes that are not fetched: {unknown}")
    return out


def to_wire(rows: Tensor, name: Optional[str]) -> Tensor:
    """Rows as sent by the owner: cast to the wire type (float32 rows only)."""
    if name is None:
        return rows
    if name not in WIRE_TYPES:
        raise ValueError(f"unknown wire type {name!r} (expected one of {WIRE_TYPES})")
    if rows.dtype != torch.float32:
        raise ValueError(f"only float32 rows travel as {name}, not {rows.dtype}")
    return rows.to(getattr(torch, name))
