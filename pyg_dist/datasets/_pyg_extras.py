"""The label and split-index files ``torch_geometric.distributed`` scripts load.

PyG's distributed examples expect, beside the partition folder ``ROOT/<name>-partitions``:

* ``ROOT/<name>-label/label.pt``: the labels of every node, a tensor indexed by node id;
* ``ROOT/<name>-<split>-partitions/partition<i>.pt`` (``split`` = ``train``, ``val``,
  ``test``): a 1-D tensor of the node ids the script on partition ``i`` uses.

:func:`write_pyg_extras` writes them from a finished pyg_dist partition folder, **in the
dataset's original ids**, as PyG writes them and as pyg_dist's API reads them
(``OUT/part_<p>/node_ids.pt`` maps relabelled id -> original id): ``label.pt`` is ``y``
ordered by original node id, and ``partition<i>.pt`` holds the original ids of the
split's nodes that partition ``i`` owns. Both are read
partition by partition from ``node_feats.pt`` (memory-mapped) and ``splits.pt``; every
file is written atomically. For heterogeneous graphs the files describe the node type
that carries ``y`` (``paper`` in ``ogbn-mag``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets._errors import DatasetError
from pyg_dist.format import _partition_io as io, _validate as validate
from pyg_dist.format._id_maps import read_part_ids
from pyg_dist.format._meta import PartitionMeta
from pyg_dist._typing import HOMO_NODE, NodeType

SUFFIX = "-partitions"
_PART_FILE = re.compile(r"^partition(\d+)\.pt$")


@dataclass(frozen=True)
class ExtrasLayout:
    """Where the extras of one partition folder go.

    Args:
        parent (Path): the folder holding the partition folder.
        name (str): the dataset name in the file names (``<name>-label`` ...).
    """
    parent: Path
    name: str

    @property
    def label_file(self) -> Path:
        return self.parent / f"{self.name}-label" / "label.pt"

    def split_dir(self, split: str) -> Path:
        return self.parent / f"{self.name}-{split}{SUFFIX}"

    def split_file(self, split: str, part: int) -> Path:
        return self.split_dir(split) / f"partition{part}.pt"

    def existing(self) -> List[Path]:
        """Extras files already on disk (label file, any ``partition<i>.pt``)."""
        found = [self.label_file] if self.label_file.exists() else []
        prefix = f"{self.name}-"
        for folder in sorted(self.parent.glob(f"{self.name}-*{SUFFIX}")):
            split = folder.name[len(prefix):-len(SUFFIX)]
            if folder.is_dir() and split and "-" not in split:
                found += [p for p in sorted(folder.iterdir()) if _PART_FILE.match(p.name)]
        return found


@dataclass
class ExtrasSummary:
    """What :func:`write_pyg_extras` wrote."""
    label_file: Path
    split_files: Dict[str, List[Path]] = field(default_factory=dict)


def extras_layout(out: Union[str, Path], dataset: str) -> ExtrasLayout:
    """The extras of partition folder ``out``: beside it, named after ``out`` without a
    trailing ``-partitions``, else after ``dataset`` (a file path: its stem)."""
    out = Path(out).absolute()
    if out.name.endswith(SUFFIX) and len(out.name) > len(SUFFIX):
        name = out.name[:-len(SUFFIX)]
    else:
        name = Path(dataset).stem if Path(dataset).suffix == ".pt" else dataset
    return ExtrasLayout(out.parent, name)


def labelled_node_type(data: Union[Data, HeteroData], requested: Optional[str] = None
                       ) -> NodeType:
    """The node type whose labels and splits the extras describe.

    Args:
        data (Data or HeteroData): the graph about to be partitioned.
        requested (str, optional): the node type to use (heterogeneous graphs only).

    Raises:
        DatasetError: no labels, several labelled node types and none requested, or
            a requested type that does not exist or has no ``y``.
    """
    if isinstance(data, Data):
        return choose_labelled_type([HOMO_NODE] if isinstance(data.get("y"), Tensor) else [],
                                    False, requested)
    return choose_labelled_type([t for t in data.node_types
                                 if isinstance(data[t].get("y"), Tensor)], True, requested)


def choose_labelled_type(typed: List[NodeType], is_hetero: bool,
                         requested: Optional[str] = None) -> NodeType:
    """The labelled node type among ``typed`` (the node types that have ``y``): the one
    ``requested``, else the only one (see :func:`labelled_node_type`)."""
    if not is_hetero:
        if requested is not None:
            raise DatasetError("--pyg-extras-type applies to heterogeneous graphs only")
        if not typed:
            raise DatasetError("--pyg-extras needs node labels y, which the graph lacks")
        return typed[0]
    if requested is not None:
        if requested not in typed:
            raise DatasetError(f"--pyg-extras-type {requested}: not a node type with labels y "
                               f"(labelled node types: {typed or 'none'})")
        return requested
    if len(typed) != 1:
        raise DatasetError(f"--pyg-extras needs one labelled node type, the graph has "
                           f"{typed or 'none'}" + ("; name one with --pyg-extras-type"
                                                   if typed else ""))
    return typed[0]


def _part_tensors(root: Path, meta: PartitionMeta, part: int, node_type: NodeType
                  ) -> tuple:
    """(labels, {split: ids}) of ``node_type`` in partition ``part``, validated."""
    folder = io.check_part(root, meta, part)
    validate.check_uid(folder / io.GRAPH_FILE, io.read_uid(folder), meta)
    feats_path, splits_path = folder / io.NODE_FEATS_FILE, folder / io.SPLITS_FILE
    feats = validate.check_node_feats(io.load_pt(feats_path, "node feature file", mmap=True),
                                      meta, part, feats_path)
    if "y" not in feats.get(node_type, {}):
        raise DatasetError(f"{feats_path} has no labels y for node type '{node_type}'")
    splits = validate.check_splits(io.load_pt(splits_path, "split file"), meta, part,
                                   splits_path)
    return feats[node_type]["y"], splits.get(node_type, {})


def _remove_stale(folder: Path, num_parts: int) -> None:
    """Removes ``partition<i>.pt`` files with ``i >= num_parts`` (left by an earlier run)."""
    for path in folder.iterdir():
        match = _PART_FILE.match(path.name)
        if match and int(match.group(1)) >= num_parts:
            path.unlink()


def write_pyg_extras(root: Union[str, Path], layout: ExtrasLayout,
                     node_type: Optional[NodeType] = None) -> ExtrasSummary:
    """Writes ``label.pt`` and the per-partition split files of partition folder ``root``.

    Args:
        root (str or Path): a finished pyg_dist partition folder.
        layout (ExtrasLayout): where to write (see :func:`extras_layout`).
        node_type (str, optional): the labelled node type (default: the only one).

    Returns:
        ExtrasSummary: the files written.
    """
    root = Path(root)
    meta = io.read_meta(root)
    node_type = node_type or (meta.node_types[0] if not meta.is_hetero else None)
    if node_type not in meta.node_types:
        raise DatasetError(f"node type {node_type!r} is not in {root} "
                           f"(node types: {list(meta.node_types)})")
    labels: List[Tensor] = []
    originals: List[Tensor] = []
    per_part: List[Dict[str, Tensor]] = []
    for part in range(meta.num_parts):
        y, splits = _part_tensors(root, meta, part, node_type)
        ids = read_part_ids(root, meta, part)[node_type]
        start = meta.node_offsets[node_type][part]
        labels.append(y)
        originals.append(ids)
        per_part.append({s: ids[v - start] for s, v in splits.items()})
    summary = ExtrasSummary(layout.label_file)
    empty = torch.empty(0, dtype=torch.long)
    for split in sorted({s for splits in per_part for s in splits}):
        layout.split_dir(split).mkdir(parents=True, exist_ok=True)
        for part, splits in enumerate(per_part):
            io.save_pt(splits.get(split, empty).clone(), layout.split_file(split, part))
        _remove_stale(layout.split_dir(split), meta.num_parts)
        summary.split_files[split] = [layout.split_file(split, p)
                                      for p in range(meta.num_parts)]
    label = torch.empty_like(torch.cat(labels))
    label[torch.cat(originals)] = torch.cat(labels)  # dataset order
    layout.label_file.parent.mkdir(parents=True, exist_ok=True)
    io.save_pt(label.view(-1) if label.dim() == 2 and label.size(1) == 1 else label,
               layout.label_file)
    return summary
