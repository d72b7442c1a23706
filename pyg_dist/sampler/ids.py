"""Original ids on the wire: the column owners send with their rows.

The rule (original ids at the API, relabelled ids inside) and every translation live in
:mod:`pyg_dist.store._original_ids`, the one id-translation module. Relabelled -> original for
batches costs no extra round trip: the owner of a node or edge reads its original id
from its mapped ``node_ids.pt``/``edge_ids.pt`` and sends it as one more column of the
rows it already sends (:data:`ID_ATTR`): remote rows, direct same-machine reads and the
feature cache all carry it.
"""
from __future__ import annotations

from pyg_dist.store._original_ids import PartIds, check_ids, partition_root

#: the reserved attribute name under which owners send original ids with their rows
ID_ATTR = "__original_id__"

__all__ = ["ID_ATTR", "PartIds", "check_ids", "partition_root"]
