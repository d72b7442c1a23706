"""Labels and split chunks beside a PyG partition folder, as PyG's distributed examples
write them.

PyG's ``examples/distributed/pyg/partition_graph.py`` writes, next to the partition
folder ``<dir>/<name>-partitions``::

    <dir>/<name>-label/label.pt                      labels of every node, original ids
    <dir>/<name>-{train,val,test}-partitions/partition<i>.pt
                                                     chunk i of the split's node ids

(for a heterogeneous graph, of one node type, e.g. ``paper``). :class:`PygExtras` reads
them into labels and boolean ``<split>_mask`` attributes of the original graph, so the
converted partitions carry the splits. Writing them back beside one of our partition
folders, in the same original ids, is
:func:`pyg_dist.datasets._pyg_extras.write_pyg_extras` (shared with
``pyg-dist-partition --pyg-extras``); the paths are its
:class:`~pyg_dist.datasets._pyg_extras.ExtrasLayout`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.convert._pickles import PickleLoader, PygFormatError
from pyg_dist.convert._pyg_layout import check_range, index_tensor
from pyg_dist.datasets._pyg_extras import SUFFIX, ExtrasLayout
from pyg_dist._typing import HOMO_NODE, NodeType

SPLITS = ("train", "val", "test")
_CHUNK = re.compile(r"partition(\d+)\.pt")


def extras_layout_of(folder: Union[str, Path]) -> ExtrasLayout:
    """Where the extras of partition folder ``<dir>/<name>-partitions`` are: ``<dir>``,
    named ``<name>`` (a folder without the suffix: its own name)."""
    folder = Path(folder).absolute()
    name = folder.name
    if name.endswith(SUFFIX) and len(name) > len(SUFFIX):
        name = name[:-len(SUFFIX)]
    return ExtrasLayout(folder.parent, name)


@dataclass
class PygExtras:
    """Labels and split nodes found beside a partition folder, in original ids.

    Args:
        node_type (str): the node type they describe (``"_N"`` if homogeneous).
        label (Tensor, optional): the label of every node of ``node_type``.
        masks (Dict[str, Tensor]): per split found, a boolean mask over those nodes.
    """
    node_type: NodeType
    label: Optional[Tensor]
    masks: Dict[str, Tensor]

    @classmethod
    def find(cls, folder: Path, num_parts: int, num_nodes: Dict[NodeType, int],
             node_type: Optional[NodeType], loader: PickleLoader,
             counted_by: Optional[Dict[NodeType, Path]] = None) -> Optional["PygExtras"]:
        """Reads the extras beside ``folder``; ``None`` when there are none.

        Args:
            folder (Path): the PyG partition folder.
            num_parts (int): its number of partitions (one split chunk each).
            num_nodes (Dict[str, int]): nodes per type of the graph.
            node_type (str, optional): the node type they describe; ``None``: the only
                node type, or the only one with as many nodes as ``label.pt`` has rows.
            loader (PickleLoader): how the files are loaded.
            counted_by (Dict[str, Path], optional): per node type, the file that
                gave ``num_nodes`` (for error messages).
        """
        where = extras_layout_of(folder)
        label_path = where.label_file
        splits = [s for s in SPLITS if where.split_dir(s).is_dir()]
        if not label_path.is_file() and not splits:
            return None
        label = loader.load(label_path, "label file") if label_path.is_file() else None
        node_type = _label_type(node_type, num_nodes, label, label_path)
        n = num_nodes[node_type]
        if label is not None and (not isinstance(label, Tensor) or label.dim() == 0
                                  or label.size(0) != n):
            got = tuple(label.shape) if isinstance(label, Tensor) else type(label).__name__
            source = f", as {counted_by[node_type]} counts them" if counted_by else ""
            raise PygFormatError(f"{label_path} has shape {got}, expected {n} rows (one per "
                                 f"node{_of(node_type)}{source})")
        masks = {s: _read_split(where.split_dir(s), num_parts, n, loader) for s in splits}
        return cls(node_type, label, masks)

    def apply(self, data: Union[Data, HeteroData]) -> None:
        """Sets ``y`` and ``<split>_mask`` on the graph's ``node_type`` nodes."""
        store = data[self.node_type] if isinstance(data, HeteroData) else data
        if self.label is not None:
            store.y = self.label
        for split, mask in self.masks.items():
            store[f"{split}_mask"] = mask


def _of(node_type: NodeType) -> str:
    return "" if node_type == HOMO_NODE else f" of type '{node_type}'"


def _label_type(node_type: Optional[NodeType], num_nodes: Dict[NodeType, int],
                label: object, label_path: Path) -> NodeType:
    """The node type the extras describe (see :meth:`PygExtras.find`)."""
    if node_type is not None:
        if node_type not in num_nodes:
            raise PygFormatError(f"label node type '{node_type}' is not a node type of the "
                                 f"graph ({', '.join(num_nodes)})")
        return node_type
    if len(num_nodes) == 1:
        return next(iter(num_nodes))
    rows = label.size(0) if isinstance(label, Tensor) and label.dim() else None
    fits = [t for t, n in num_nodes.items() if n == rows]
    if len(fits) != 1:
        raise PygFormatError(f"cannot tell which node type the extras beside "
                             f"{label_path.parent.parent} describe ({label_path.name}: "
                             f"{rows if rows is not None else 'absent'} rows; node counts "
                             f"{num_nodes}): name it with --label-node-type")
    return fits[0]


def _read_split(folder: Path, num_parts: int, num_nodes: int, loader: PickleLoader) -> Tensor:
    """The mask of the nodes listed by ``folder/partition<i>.pt``, ``i < num_parts``."""
    for path in folder.iterdir():
        match = _CHUNK.fullmatch(path.name)
        if match and int(match.group(1)) >= num_parts:
            raise PygFormatError(f"{path}: the partition folder has only {num_parts} "
                                 f"partition(s)")
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    for i in range(num_parts):
        path = folder / f"partition{i}.pt"
        ids = index_tensor(loader.load(path, "split file"), path, "node ids")
        check_range(ids, num_nodes, path, "node ids")
        mask[ids] = True
    return mask
