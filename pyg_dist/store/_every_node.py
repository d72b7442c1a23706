"""A node ``time`` for every node, as ``torch_geometric.distributed``'s partitions hold it.

PyG's partitioner copied every node's ``time`` into every partition, and its stores
answer ``get_tensor(group, "time")`` (no ``index``) with all ``num_nodes`` values in
original id order; its temporal sampler read halo nodes' times from there. pyg_dist's
partition files hold owned rows only (no file is sized by the whole graph; halo times
are in ``graph.pt``), so the store *assembles* the whole attribute on first use, from
every partition's ``node_feats.pt`` (mapped) and id file, and keeps it:
``num_nodes x row size`` bytes in this process (8 bytes per node for an int64 time),
only in processes that ask. A store built in memory keeps the tensor the user put
(:mod:`pyg_dist.store._memory_partition`).

``get_tensor(..., index=ids)`` of such an attribute takes any original node id: owned
ids are read from the partition's rows, others from the whole attribute.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import torch
from torch import Tensor

from pyg_dist.format import _partition_io as io, _validate as validate
from pyg_dist.store._original_ids import check_ids, take_rows
from pyg_dist._typing import NodeType

#: node attributes held for every node (PyG's partitioner's name for node time)
EVERY_NODE_ATTRS = ("time",)

Key = Tuple[NodeType, str]


def is_every_node(group: Any, attr_name: str) -> bool:
    """Whether ``(group, attr_name)`` is a node attribute answered for every node."""
    return not isinstance(group, tuple) and attr_name in EVERY_NODE_ATTRS


def assemble(store: Any, node_type: NodeType, attr_name: str) -> Tensor:
    """Every node's rows of an attribute, in original id order, from every partition.

    Args:
        store: a :class:`~pyg_dist.store.LocalFeatureStore` opened from a folder.
        node_type (str): the node type.
        attr_name (str): the attribute.

    Raises:
        ValueError: the partition folder is not readable here, or a partition lacks
            the attribute.
    """
    root = store.id_tables.root
    if root is None:
        raise ValueError(f"'{attr_name}' of node type '{node_type}' for every node: the "
                         f"store holds partition {store.part}'s rows only (put one row per "
                         f"node of the graph in the store built in memory)")
    own = store.tensor(node_type, attr_name)
    out = own.new_empty((store.meta.num_nodes[node_type], *own.shape[1:]))
    for part in range(store.meta.num_parts):
        rows = own if part == store.part else \
            _node_feats(store, Path(root) / f"part_{part}", part).get(node_type, {}).get(attr_name)
        if rows is None:
            raise ValueError(f"partition {part} of {root} has no node attribute "
                             f"'{attr_name}' of node type '{node_type}'")
        ids = store.id_tables.owned("node", node_type, part).ids.long()
        out[ids] = rows.to(out.dtype)
    return out


def _node_feats(store: Any, folder: Path, part: int) -> Dict[NodeType, Dict[str, Tensor]]:
    """Partition ``part``'s node attributes (mapped, checked against the store's META)."""
    path = folder / io.NODE_FEATS_FILE
    return validate.check_node_feats(io.load_pt(path, "node feature file", mmap=True),
                                     store.meta, part, path)


def rows_of(store: Any, whole: Callable[[], Tensor], group: NodeType, attr_name: str,
            index: Any) -> Tensor:
    """Rows of original ids ``index`` (any node): owned ones from the partition's rows,
    the others from ``whole()`` (every node's rows)."""
    owned = store.owned_ids(group)
    try:
        rows = owned.to_rows(index, "index")
    except ValueError:
        from_all = whole()
        ids = torch.arange(from_all.size(0))[index] if isinstance(index, slice) else \
            check_ids(index, from_all.size(0), "index", f"node type '{group}'")
        return take_rows(from_all, ids)
    return take_rows(store.tensor(group, attr_name), rows)

