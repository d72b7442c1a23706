"""Writing every node's inference output to files, in the dataset's original node ids.

The format is :mod:`pyg_dist.inference._export_manifest`'s. Every partition's file pair is
written by the first rank serving it (it reads its partition-mates' rows), and the
whole folder appears at once: the pairs are written into a hidden temporary folder
next to ``DIR`` that one process renames to ``DIR`` after every pair is complete
(:func:`~pyg_dist.format._files.atomic_dir`), so a killed export leaves the previous
export (or nothing), never a half-written one.

Which ranks share a folder is found out, not configured: every rank drops a marker
file next to ``DIR`` and looks for the others'. With a shared file system all ranks
see all markers and ``DIR`` gets one manifest listing every partition; with a file
system per machine each machine's ``DIR`` holds, and its manifest lists, the
partitions served on that machine.
"""
from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch

from pyg_dist.embedding import DistTensor
from pyg_dist.embedding._comm import Comm
from pyg_dist.inference import _export_manifest as fmt
from pyg_dist.inference import _tensor_rows as rows
from pyg_dist.format import _files as files, _partition_io as io
from pyg_dist.format._id_maps import read_part_ids
from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc import DistContext
from pyg_dist._typing import NodeType

PathLike = Union[str, Path]
Result = Union[DistTensor, Mapping[NodeType, DistTensor]]
FORMATS = ("npy", "parquet")


def export(result: Result, partition_dir: PathLike, out_dir: PathLike, *,
           overwrite: bool = False, chunk: int = 65536, format: str = "npy",
           ctx: Optional[DistContext] = None) -> Path:
    """Writes every node's row of ``result`` to ``out_dir`` by original node id (collective).

    Args:
        result (DistTensor or Dict[str, DistTensor]): rows of every node, sharded like
            the graph (as :func:`~pyg_dist.inference._layerwise` returns them); a dict by
            node type for heterogeneous graphs (the types it holds are exported).
        partition_dir (str or Path): the partition folder (for the original ids).
        out_dir (str or Path): the export folder to create.
        overwrite (bool): replace an existing, non-empty ``out_dir``.
        chunk (int): rows read and written at a time.
        format (str): ``"npy"``, or ``"parquet"``: also a parquet file per pair, beside
            the ``.npy`` files (columns ``id`` and ``values``; needs ``pyarrow``).
        ctx (DistContext, optional): this process's context (default: from the env).

    Returns:
        Path: ``out_dir``.

    Raises:
        FileExistsError: if ``out_dir`` exists and ``overwrite`` is False, also when
            another job created it while this one was writing (the other ranks get a
            RuntimeError naming the rank).
        ValueError: ``chunk`` below 1, or an unknown ``format``.
        TypeError: ``overwrite`` not a bool, ``chunk`` not an integer.
    """
    ctx = ctx or DistContext.from_env()
    meta = io.read_meta(partition_dir)
    tensors = _by_type(result, meta)
    _check_options(overwrite, chunk, format)
    out = Path(out_dir)
    comm = next(iter(tensors.values())).comm
    token = comm.all_gather_object(uuid.uuid4().hex)[0]
    view = _shared_with(out, token, comm)
    part = ctx.partition_id(meta.num_parts)
    leader = ctx.ranks_of(part, meta.num_parts)[0] == ctx.rank
    with ExitStack() as stack:
        tmp, folder = _claim_folder(stack, out, overwrite, comm, view[0], ctx.rank == view[0])
        error: Optional[BaseException] = None
        try:
            if leader:
                for node_type, tensor in tensors.items():
                    _write_pair(tensor, partition_dir, meta, node_type, part, folder, chunk,
                                format == "parquet")
        except Exception as exc:  # re-raised by agree, and reported to every other rank
            error = exc
        comm.agree(error, f"writing export {out}")
        if tmp is not None:
            _write_manifest(tmp, list(tensors), sorted(ctx.partition_of(r, meta.num_parts)
                                                       for r in view), format == "parquet")
            try:  # renames tmp to out, refused if another job created out meanwhile
                stack.close()
            except OSError as exc:
                error = exc
    comm.agree(error, f"finishing export {out}")  # nobody returns before out_dir is there
    return out


def _check_options(overwrite: bool, chunk: int, format: str) -> None:
    """Raises unless ``overwrite`` is a bool, ``chunk`` an integer >= 1 (a chunk of 0 or
    fewer rows wrote no rows at all) and ``format`` one of :data:`FORMATS` whose writer
    can run here."""
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {type(overwrite).__name__} "
                        f"{overwrite!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)):
        raise TypeError(f"chunk must be an integer >= 1, got {type(chunk).__name__} {chunk!r}")
    if chunk < 1:
        raise ValueError(f"chunk must be an integer >= 1, got {chunk}")
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    if format == "parquet":
        fmt.require_pyarrow()


def _claim_folder(stack: ExitStack, out: Path, overwrite: bool, comm: Comm, first: int,
                  is_first: bool) -> Tuple[Optional[Path], Path]:
    """Creates the hidden temporary folder of ``out`` on the first rank sharing it
    (collective; the folder is renamed to ``out`` when ``stack`` closes).

    Args:
        stack (ExitStack): holds the temporary folder until the export is complete.
        out (Path): the export folder.
        overwrite (bool): replace an existing, non-empty ``out``.
        comm (Comm): the ranks of the exported tensors.
        first (int): the rank that creates the folder for the ranks sharing it.
        is_first (bool): whether this rank is ``first``.

    Returns:
        the temporary folder (``None`` except on ``first``), and where it is.
    """
    error: Optional[BaseException] = None
    tmp: Optional[Path] = None
    try:
        if is_first:
            tmp = stack.enter_context(files.atomic_dir(out, overwrite=overwrite))
    except (OSError, ValueError) as exc:
        error = exc
    comm.agree(error, f"creating export folder {out}")
    return tmp, Path(comm.all_gather_object(str(tmp) if tmp else "")[first])


def _write_manifest(tmp: Path, node_types: List[NodeType], parts: List[int],
                    parquet: bool) -> None:
    """Writes the manifest listing the file pairs of ``parts`` for every node type."""
    entries = {t: [fmt.pair_paths(t, p, parquet) for p in dict.fromkeys(parts)]
               for t in node_types}
    files.write_json(tmp / fmt.MANIFEST, fmt.manifest(entries))


def _shared_with(out: Path, token: str, comm) -> List[int]:
    """The ranks whose file system shows ``out``'s parent as this rank sees it (sorted)."""
    marker = out.parent / f".{out.name}.export-{token}-{comm.rank}"
    error: Optional[BaseException] = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError as exc:
        error = exc
    comm.agree(error, f"creating {out.parent}")
    try:
        seen = [r for r in range(comm.world_size)
                if (out.parent / f".{out.name}.export-{token}-{r}").exists()]
        comm.all_gather_object(None)  # every rank has looked
    finally:
        marker.unlink(missing_ok=True)
    return seen


def _by_type(result: Result, meta: PartitionMeta) -> Dict[NodeType, DistTensor]:
    """``result`` by node type, each checked to hold one row per node of its type."""
    if isinstance(result, DistTensor):
        if meta.is_hetero:
            raise ValueError("the graph is heterogeneous: result must be a dict of node type "
                             "-> DistTensor (as layerwise returns it)")
        result = {meta.node_types[0]: result}
    if not isinstance(result, Mapping) or not result:
        raise TypeError(f"result must be a DistTensor or a non-empty dict of node type -> "
                        f"DistTensor, got {type(result).__name__}")
    for node_type, tensor in result.items():
        if node_type not in meta.node_types or not isinstance(tensor, DistTensor):
            raise ValueError(f"result[{node_type!r}]: not a DistTensor of a node type of the "
                             f"graph ({list(meta.node_types)})")
        if tensor.dim() != 2 or tensor.shape[0] != meta.num_nodes[node_type]:
            raise ValueError(f"result[{node_type!r}] must hold one row per node "
                             f"({meta.num_nodes[node_type]}), got shape {tuple(tensor.shape)}")
    return {t: result[t] for t in meta.node_types if t in result}


def _write_pair(result: DistTensor, partition_dir: PathLike, meta: PartitionMeta,
                node_type: NodeType, part: int, folder: Path, chunk: int,
                parquet: bool) -> None:
    """Writes partition ``part``'s ids and rows of ``node_type`` into ``folder`` (``chunk``
    rows at a time), and their parquet file if ``parquet``."""
    paths: Dict[str, str] = fmt.pair_paths(node_type, part, parquet)
    ids = read_part_ids(partition_dir, meta, part)[node_type]
    (folder / paths["ids"]).parent.mkdir(parents=True, exist_ok=True)
    np.save(folder / paths["ids"], ids.numpy().astype(np.int64, copy=False))
    start = meta.node_offsets[node_type][part]
    values = np.lib.format.open_memmap(folder / paths["values"], mode="w+", dtype=np.float32,
                                       shape=(ids.numel(), result.shape[1]))
    for lo in range(0, ids.numel(), chunk):
        hi = min(lo + chunk, ids.numel())
        values[lo:hi] = rows.read_rows(result, torch.arange(start + lo, start + hi)).numpy()
    values.flush()
    del values
    if parquet:
        fmt.write_parquet(folder / paths["parquet"], folder / paths["ids"],
                          folder / paths["values"], chunk)
