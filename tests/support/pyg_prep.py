"""Label and split files prepared the way PyG's ``examples/distributed/pyg/partition_graph.py``
prepares them: in the dataset's own ids, never pyg_dist's relabelled ones.

PyG writes, beside the partition folder ``<out>/<name>-partitions``:

* ``<out>/<name>-label/label.pt``: ``y`` of every node (of the labelled node type) in
  the dataset's order; for link datasets, the per-edge labels;
* ``<out>/<name>-<split>-partitions/partition<i>.pt``: the dataset ids of the split's
  nodes that partition ``i`` holds (for links: a dict of ``edge_label_index``,
  ``edge_label`` and ``edge_label_time`` of the split's edges partition ``i`` stores).

Which partition holds a node comes from the partition folder (``node_ids.pt``), as
PyG's script takes it from its own partitioning; nothing else is translated.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_part_ids
from pyg_dist._typing import EdgeType, NodeType

SPLITS = ("train", "val", "test")


def _store(data: Union[Data, HeteroData], group: Optional[Union[NodeType, EdgeType]]):
    return data if group is None else data[group]


def write_pyg_node_files(data: Union[Data, HeteroData], parts: Union[str, Path],
                         out: Union[str, Path], name: str,
                         node_type: Optional[NodeType] = None) -> Dict[str, List[Path]]:
    """Writes ``label.pt`` and ``partition<i>.pt`` of every ``<split>_mask`` of the
    labelled node type (``None``: a homogeneous graph) in dataset ids.

    Args:
        data: the unpartitioned graph, in the dataset's order.
        parts: its pyg_dist partition folder.
        out: the folder beside it (PyG's ``--dataset_root_dir``).
        name: the dataset name in the file names.
        node_type: the labelled node type of a heterogeneous graph.

    Returns:
        The split files written, by split.
    """
    out, meta = Path(out), io.read_meta(parts)
    store = _store(data, node_type)
    key = meta.node_type(node_type)
    label = out / f"{name}-label" / "label.pt"
    label.parent.mkdir(parents=True, exist_ok=True)
    io.save_pt(store.y.clone(), label)
    written: Dict[str, List[Path]] = {}
    for split in SPLITS:
        mask = store.get(f"{split}_mask")
        if mask is None:
            continue
        folder = out / f"{name}-{split}-partitions"
        folder.mkdir(parents=True, exist_ok=True)
        written[split] = []
        for part in range(meta.num_parts):
            held = read_part_ids(parts, meta, part)[key]
            ids = torch.sort(held[mask[held]]).values
            io.save_pt(ids.clone(), folder / f"partition{part}.pt")
            written[split].append(folder / f"partition{part}.pt")
    return written


def write_pyg_link_files(data: HeteroData, parts: Union[str, Path], out: Union[str, Path],
                         name: str, edge_type: EdgeType, time_attr: str,
                         masks: Dict[str, Tensor]) -> Dict[str, List[Path]]:
    """Writes the per-edge ``label.pt`` and, per split, ``partition<i>.pt`` dicts of the
    split's edges partition ``i`` stores (``edge_label_index`` in dataset node ids,
    ``edge_label``, ``edge_label_time``), as PyG's temporal link example loads them.

    Args:
        data: the unpartitioned graph (``edge_label`` and ``time_attr`` on ``edge_type``).
        parts: its pyg_dist partition folder.
        out: the folder beside it.
        name: the dataset name in the file names.
        edge_type: the labelled edge type.
        time_attr: the edge time attribute.
        masks: a boolean mask over the edges of ``edge_type`` per split.
    """
    out, meta = Path(out), io.read_meta(parts)
    store = data[edge_type]
    label = out / f"{name}-label" / "label.pt"
    label.parent.mkdir(parents=True, exist_ok=True)
    io.save_pt(store.edge_label.clone(), label)
    written: Dict[str, List[Path]] = {}
    for split, mask in masks.items():
        folder = out / f"{name}-{split}-partitions"
        folder.mkdir(parents=True, exist_ok=True)
        written[split] = []
        for part in range(meta.num_parts):
            held = read_part_ids(parts, meta, part, "edge")[meta.edge_type(edge_type)]
            eids = torch.sort(held[mask[held]]).values
            files = {"edge_label_index": store.edge_index[:, eids].clone(),
                     "edge_label": store.edge_label[eids].clone(),
                     "edge_label_time": store[time_attr][eids].clone()}
            io.save_pt(files, folder / f"partition{part}.pt")
            written[split].append(folder / f"partition{part}.pt")
    return written
