"""The identity (``uid``) of a partitioning: a sha256 over what defines it.

:func:`partition_uid` hashes the ``META.json`` fields that define the partitioning
(:data:`IDENTITY_FIELDS`: counts, types, offsets, attribute specs, method and seed)
and every partition's digest of its id maps (original ids of its nodes and edges per
type, :func:`part_digest`). Arrays are hashed
in blocks straight from their memory, so no copy of the graph is made. The same data,
method and seed give the same uid; another seed, another uid.

Folders written before uids existed carry none: :func:`fallback_uid` derives one
from the canonical form of their ``META.json`` document, so they keep working.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence, Union

import numpy as np
from torch import Tensor

from pyg_dist._typing import edge_key

IDENTITY_FIELDS = ("format", "version", "num_parts", "is_hetero", "node_types", "edge_types",
                   "num_nodes", "num_edges", "node_offsets", "edge_offsets", "node_attrs",
                   "edge_attrs", "splits", "method", "seed")
_BLOCK = 1 << 22  # elements hashed per update: bounds any temporary to a few MB

ArrayLike = Union[np.ndarray, Tensor]


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def fallback_uid(meta_json: Mapping[str, Any]) -> str:
    """The uid of a folder whose ``META.json`` has none: sha256 of its canonical JSON."""
    return hashlib.sha256(_canonical(dict(meta_json))).hexdigest()


def _update(digest: "hashlib._Hash", name: str, array: ArrayLike) -> None:
    """Feeds ``name``, dtype, shape and the little-endian bytes of ``array``."""
    if isinstance(array, Tensor):
        array = array.detach().cpu().numpy()
    flat = np.asarray(array).reshape(-1)  # a view for the contiguous maps we hash
    little = flat.dtype.newbyteorder("<")
    digest.update(_canonical([name, little.str, list(np.shape(array))]))
    for lo in range(0, flat.size, _BLOCK):
        block = np.ascontiguousarray(flat[lo:lo + _BLOCK]).astype(little, copy=False)
        digest.update(block)


def part_digest(node_ids: Mapping[Any, ArrayLike], edge_ids: Mapping[Any, ArrayLike]) -> str:
    """A hex sha256 of one partition's id maps: per node type the original ids of the
    nodes it owns, per edge type (tuple or ``"src__rel__dst"`` key) the original ids of
    its edges, both in new-id order."""
    digest = hashlib.sha256()
    for kind, maps in (("node", node_ids), ("edge", edge_ids)):
        named = {k if isinstance(k, str) else edge_key(k): v for k, v in maps.items()}
        for name in sorted(named):
            _update(digest, f"{kind}:{name}", named[name])
    return digest.hexdigest()


def partition_uid(meta_json: Mapping[str, Any], part_digests: Sequence[str]) -> str:
    """A hex sha256 identifying a partitioning.

    Partitions are hashed one by one (:func:`part_digest`), so a writer never needs
    more than one partition's id maps at once, and writers on several machines can
    each hash their own.

    Args:
        meta_json (Mapping): the ``META.json`` document (or part of it); only
            :data:`IDENTITY_FIELDS` are hashed (per-partition statistics are not).
        part_digests (Sequence[str]): :func:`part_digest` of every partition, in order.
    """
    digest = hashlib.sha256()
    digest.update(_canonical({k: meta_json[k] for k in IDENTITY_FIELDS if k in meta_json}))
    digest.update(_canonical(list(part_digests)))
    return digest.hexdigest()
