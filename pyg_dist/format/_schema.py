"""Typed reading of what partition files hold: a wrong type is an error naming the field.

:class:`Field` wraps one JSON value with the path that names it (``num_parts``,
``node_attrs["paper"]["x"]["shape"]``); its ``as_*`` readers return the value with
the expected Python type or raise :class:`PartitionFormatError` naming the file and
the field, never a ``TypeError``/``KeyError`` from deep inside. :data:`DTYPES` is
the allow-list of tensor dtypes an attribute may declare in ``META.json``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, NoReturn, Optional, Tuple

import torch

from pyg_dist.errors import PygDistError


class PartitionFormatError(ValueError, PygDistError):
    """A partition folder is missing a file, has another version, or is inconsistent."""


_DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32",
                "uint64", "float16", "bfloat16", "float32", "float64", "complex64",
                "complex128")
#: dtype names an attribute may declare in ``META.json`` (``str(dtype)`` without ``torch.``).
DTYPES: Dict[str, torch.dtype] = {
    name: getattr(torch, name) for name in _DTYPE_NAMES
    if isinstance(getattr(torch, name, None), torch.dtype)}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (the form ``META.json`` uses)."""
    return str(dtype).replace("torch.", "")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Field:
    """One value read from a file, named by ``path`` inside ``source`` for errors.

    Args:
        value: the value as parsed (from JSON or ``torch.load``).
        path (str): how error messages name it, e.g. ``node_offsets["paper"]``.
        source (str): the file it came from.
    """
    value: Any
    path: str
    source: str

    def fail(self, expected: str) -> NoReturn:
        where = f"field {self.path}" if self.path else "the document"
        raise PartitionFormatError(f"{self.source}: {where} must be {expected}, "
                                   f"got {_show(self.value)}")

    def child(self, key: Any, value: Any) -> "Field":
        name = f"{self.path}[{key!r}]" if self.path else str(key)
        return Field(value, name.replace("'", '"'), self.source)

    # ---- containers -----------------------------------------------------------------
    def as_dict(self) -> Dict[str, "Field"]:
        if not isinstance(self.value, dict):
            self.fail("an object (a dict)")
        for key in self.value:
            if not isinstance(key, str):
                self.fail("an object with string keys")
        return {k: self.child(k, v) for k, v in self.value.items()}

    def as_list(self, length: Optional[int] = None) -> List["Field"]:
        if not isinstance(self.value, list):
            self.fail("a list")
        if length is not None and len(self.value) != length:
            self.fail(f"a list of {length} entries")
        return [self.child(i, v) for i, v in enumerate(self.value)]

    def __getitem__(self, key: str) -> "Field":
        fields = self.as_dict()
        if key not in fields:
            self.child(key, None).fail("present")
        return fields[key]

    def get(self, key: str, default: Any) -> "Field":
        """The field ``key`` of an object, or ``default`` wrapped as a field."""
        fields = self.as_dict()
        return fields[key] if key in fields else self.child(key, default)

    # ---- scalars --------------------------------------------------------------------
    def as_int(self, minimum: Optional[int] = None) -> int:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail("an integer")
        if minimum is not None and value < minimum:
            self.fail(f"an integer >= {minimum}")
        return value

    def as_bool(self) -> bool:
        if not isinstance(self.value, bool):
            self.fail("true or false")
        return self.value

    def as_str(self) -> str:
        if not isinstance(self.value, str):
            self.fail("a string")
        return self.value

    def as_ints(self, minimum: Optional[int] = None) -> Tuple[int, ...]:
        if not isinstance(self.value, list):
            self.fail("a list of integers")
        return tuple(f.as_int(minimum) for f in self.as_list())

    def as_strs(self, length: Optional[int] = None) -> Tuple[str, ...]:
        if not isinstance(self.value, list):
            self.fail("a list of strings")
        return tuple(f.as_str() for f in self.as_list(length))

    def as_dtype(self) -> str:
        name = self.as_str()
        if name not in DTYPES:
            self.fail(f"a tensor dtype name (one of {', '.join(DTYPES)})")
        return name
