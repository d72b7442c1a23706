"""Converting a ``torch_geometric.distributed`` partition folder into pyg_dist's format.

The conversion keeps PyG's assignment of nodes to partitions (no repartitioning): the
original graph is rebuilt from the partitions (:mod:`pyg_dist.convert._pyg_graph`),
labels and splits found beside the folder are attached (:mod:`pyg_dist.convert._extras`),
and :class:`~pyg_dist.partition.Partitioner` with ``method="given"`` and PyG's node
map relabels ids into contiguous ranges and writes the partitions atomically, exactly
as ``pyg-dist-partition`` does. The whole graph is held in one process while
converting, as PyG's own partitioner needed too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Tuple, Union

from torch_geometric.data import Data, HeteroData

from pyg_dist.convert._extras import PygExtras, extras_layout_of
from pyg_dist.convert._pickles import PickleLoader, PygFormatError
from pyg_dist.convert._pyg_graph import PygGraphReader
from pyg_dist.convert._pyg_layout import PygLayout
from pyg_dist.datasets._pyg_extras import ExtrasLayout, extras_layout, write_pyg_extras
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.partition._partitioner import Partitioner
from pyg_dist._typing import HOMO_NODE, NodeType


@dataclass
class ConvertResult:
    """What :func:`convert_pyg_partitions` did.

    Args:
        meta (PartitionMeta): the written partitioning.
        label_node_type (str, optional): node type of the labels/splits found beside
            the input (``None``: none found).
        splits (Tuple[str, ...]): splits found beside the input.
        unsafe_files (int): files loaded with ``weights_only=False`` (trusted pickles).
        extras_written (List[Path]): extras files written beside the output.
    """
    meta: PartitionMeta
    label_node_type: Optional[NodeType] = None
    splits: Tuple[str, ...] = ()
    unsafe_files: int = 0
    extras_written: List[Path] = field(default_factory=list)


def _check_out_free(out: Path, overwrite: bool) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"output {out} exists and is not empty (pass overwrite=True / "
                              f"--overwrite to replace it)")


def _extras_target(layout: PygLayout, out: Path, extras: Optional[PygExtras],
                   overwrite: bool) -> ExtrasLayout:
    """Where ``--pyg-extras`` writes beside ``out``; raises if it cannot."""
    source = extras_layout_of(layout.root)
    if extras is None or extras.label is None:
        raise PygFormatError(f"--pyg-extras: no labels beside {layout.root} (looked for "
                             f"{source.label_file})")
    target = extras_layout(out, source.name)
    existing = target.existing()
    if existing and not overwrite:
        raise FileExistsError(f"{existing[0]} exists (pass overwrite=True / --overwrite to "
                              f"replace the extras beside {out})")
    return target


def convert_pyg_partitions(input: Union[str, Path], out: Union[str, Path],
                           trust_pickles: bool = False, overwrite: bool = False,
                           pyg_extras: bool = False, label_node_type: Optional[NodeType] = None,
                           progress: bool = True,
                           notify: Optional[Callable[[str], None]] = None,
                           trust_flag: str = "trust_pickles=True") -> ConvertResult:
    """Converts the PyG partition folder ``input`` into our format at ``out``.

    Holds the whole graph in one process (as PyG's own partitioner did).

    Args:
        input (str or Path): a folder written by ``torch_geometric.distributed.Partitioner``
            (PyG 2.5-2.8); labels and split chunks beside it (``<name>-label/``,
            ``<name>-{train,val,test}-partitions/``, as PyG's examples write them) become
            ``y`` and ``<split>_mask`` of the converted graph.
        out (str or Path): our output partition folder, written atomically.
        trust_pickles (bool): load files that ``torch.load(weights_only=True)`` refuses
            (PyG's ``edge_feats.pt``) with ``weights_only=False``, which can run code
            stored in them. Without it such a file raises
            :class:`~pyg_dist.convert._pickles.UntrustedPickleError`.
        overwrite (bool): replace a non-empty ``out`` (and extras files beside it).
        pyg_extras (bool): also write labels and split chunks beside ``out`` in the
            dataset's original ids (:func:`pyg_dist.datasets._pyg_extras.write_pyg_extras`, as
            ``pyg-dist-partition --pyg-extras`` does); needs ``label.pt`` beside ``input``.
        label_node_type (str, optional): the node type of the extras of a heterogeneous
            graph (default: the one with as many nodes as ``label.pt`` has rows).
        progress (bool): report progress on ``stderr``.
        notify (Callable[[str], None], optional): receives one line when a file is first
            loaded as a trusted pickle (default: a warning).
        trust_flag (str): how the caller grants trust, for messages.

    Raises:
        PygFormatError: a missing, damaged or inconsistent input file (named).
        FileExistsError: ``out`` or an extras folder is not empty and not ``overwrite``.
    """
    out = Path(out)
    _check_out_free(out, overwrite)
    loader = PickleLoader(trust_pickles, notify, trust_flag)
    layout = PygLayout.read(Path(input), loader)
    extras = _find_extras(layout, label_node_type, loader)
    target = _extras_target(layout, out, extras, overwrite) if pyg_extras else None
    data = PygGraphReader(layout, loader).read(progress)
    if extras is not None:
        extras.apply(data)
    meta = _partition_as_given(data, layout, out, overwrite, progress)
    result = ConvertResult(meta, unsafe_files=len(loader.unsafe_files))
    if extras is not None:
        result.label_node_type, result.splits = extras.node_type, tuple(extras.masks)
        if target is not None:
            result.extras_written = _write_extras(out, target, extras.node_type)
    return result


def _find_extras(layout: PygLayout, label_node_type: Optional[NodeType],
                 loader: PickleLoader) -> Optional[PygExtras]:
    """The labels and splits beside the PyG folder of ``layout`` (``None``: none found)."""
    num_nodes = {t: layout.num_nodes(t) for t in layout.node_types}
    return PygExtras.find(layout.root, layout.num_parts, num_nodes, label_node_type, loader,
                          {t: layout.node_map_path(t) for t in layout.node_types})


def _partition_as_given(data: Union[Data, HeteroData], layout: PygLayout, out: Path,
                        overwrite: bool, progress: bool) -> PartitionMeta:
    """Writes ``data`` to ``out`` with PyG's assignment of nodes to partitions kept.

    Args:
        data (Data or HeteroData): the graph rebuilt from the PyG partitions.
        layout (PygLayout): the PyG folder (its node maps give the assignment).
        out (Path): our output partition folder.
        overwrite (bool): replace a non-empty ``out``.
        progress (bool): report progress on ``stderr``.

    Raises:
        PygFormatError: when the partitioner refuses PyG's assignment.
    """
    given = dict(layout.node_maps) if layout.is_hetero else layout.node_maps[HOMO_NODE]
    try:
        partitioner = Partitioner(data, layout.num_parts, out, method="given", assignment=given,
                                  overwrite=overwrite, progress=progress)
    except ValueError as exc:
        raise PygFormatError(f"{layout.root}: cannot keep its partitioning: {exc}") from exc
    return partitioner.generate_partition()


def _write_extras(out: Path, target: ExtrasLayout, node_type: NodeType) -> List[Path]:
    """Writes the labels and split chunks beside ``out``; returns the files written."""
    summary = write_pyg_extras(out, target, node_type)
    return [summary.label_file, *(f for files in summary.split_files.values() for f in files)]
