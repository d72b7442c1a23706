"""Model and dense optimizer state through ``torch.distributed.checkpoint`` (DCP).

``get_state_dict``/``set_state_dict`` give DCP state dicts of plain modules and of
``DistributedDataParallel`` alike (no ``module.`` prefix), so a checkpoint loads into
either, on any number of ranks (a DDP model is replicated: DCP stores it once).

DCP's own reader unpickles ``.metadata`` with plain :mod:`pickle` and its load planner
reads non-tensor values (optimizer hyper-parameters) with ``torch.load(weights_only=False)``:
either runs code a crafted checkpoint carries. Loads here go through
:class:`SafeReader` and :class:`SafeLoadPlanner` instead: the metadata is unpickled by
:class:`MetadataUnpickler`, which admits only DCP's metadata classes, ``torch.Size``,
torch dtypes and paths (what torch 2.13 writes), and every value is read with
``weights_only=True`` (tensors already are, by DCP). :func:`check_dense` validates the
metadata and the sizes of the files it points into before anything is read from them.
"""
from __future__ import annotations

import contextlib
import io
import pickle
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
                                                     get_optimizer_state_dict,
                                                     set_model_state_dict,
                                                     set_optimizer_state_dict)

from pyg_dist.checkpoint._errors import CheckpointError
from pyg_dist.checkpoint._files import regular_file

METADATA = ".metadata"
_DCP_META = "torch.distributed.checkpoint.metadata"
#: the globals a DCP ``.metadata`` file of torch 2.13 refers to (checked by writing one)
ALLOWED_GLOBALS = frozenset(
    [(_DCP_META, name) for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING")]
    + [("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
       ("torch.serialization", "_get_layout")]
    + [(module, name) for module in ("pathlib", "pathlib._local")
       for name in ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")])


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles a DCP ``.metadata`` file, refusing every global but DCP's own metadata
    classes, ``torch.Size``, torch dtypes and paths."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refused global '{module}.{name}' (not a DCP "
                                         f"metadata class: the file may carry code)")
        return super().find_class(module, name)


def read_metadata(file: Path) -> Metadata:
    """The DCP metadata in ``file``, unpickled safely and checked.

    Raises:
        CheckpointError: naming ``file``, if it refers to anything but DCP's metadata
            classes, cannot be unpickled, or points outside its folder.
    """
    regular_file(file)
    try:
        with open(file, "rb") as handle:
            metadata = MetadataUnpickler(handle).load()
    except Exception as exc:  # any unpickling failure: named with the file
        raise CheckpointError(f"{file}: cannot be read as DCP metadata "
                              f"({type(exc).__name__}: {exc})") from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict) \
            or not isinstance(metadata.state_dict_metadata, dict):
        raise CheckpointError(f"{file}: not DCP metadata (got {type(metadata).__name__})")
    for index, where in metadata.storage_data.items():
        rel, offset, length = (getattr(where, k, None) for k in ("relative_path", "offset",
                                                                  "length"))
        if not isinstance(rel, str) or Path(rel).name != rel or rel in ("", ".", "..") \
                or any(type(v) is not int or v < 0 for v in (offset, length)) \
                or getattr(where, "transform_descriptors", None):
            raise CheckpointError(f"{file}: entry {str(getattr(index, 'fqn', '?'))[:80]!r} "
                                  f"points to {rel!r:.80}, not to a byte range of a file in "
                                  f"its folder")
    return metadata


def check_dense(folder: Path) -> Metadata:
    """Checks the DCP folder ``folder`` without loading it: its metadata (read safely)
    and that every file it points into is a regular file long enough.

    Raises:
        CheckpointError: naming the file that is missing, truncated or unsafe.
    """
    if not folder.is_dir() or folder.is_symlink():
        raise CheckpointError(f"{folder}: the model's folder is missing")
    metadata = read_metadata(folder / METADATA)
    ends: Dict[str, int] = {}
    for where in metadata.storage_data.values():
        ends[where.relative_path] = max(ends.get(where.relative_path, 0),
                                        where.offset + where.length)
    for name, end in sorted(ends.items()):
        size = regular_file(folder / name).st_size
        if size < end:
            raise CheckpointError(f"{folder / name}: truncated ({size} bytes, the metadata "
                                  f"needs {end})")
    return metadata


class SafeReader(FileSystemReader):
    """DCP's file system reader with :func:`read_metadata` in place of ``pickle.load``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        metadata = read_metadata(Path(self.path) / (METADATA if rank is None
                                                    else f"__{rank}{METADATA}"))
        if getattr(metadata, "storage_meta", None) is not None:
            metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, reading non-tensor values with ``weights_only=True``.

    Args:
        folder: the DCP folder (to name the file a refused value comes from).
    """

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        try:
            obj = torch.load(value, weights_only=True)
        except Exception as exc:  # a refused global or damaged bytes
            where = self.metadata.storage_data.get(read_item.storage_index)
            file = self.folder / getattr(where, "relative_path", METADATA)
            text = str(exc).splitlines()[0] if str(exc) else ""
            raise CheckpointError(f"{file}: value {read_item.dest_index.fqn!r} cannot be "
                                  f"loaded with weights_only=True ({type(exc).__name__}: "
                                  f"{text})") from None
        plain = io.BytesIO()  # only weights_only types: unpickling them again runs no code
        torch.save(obj, plain)
        plain.seek(0)
        super().load_bytes(read_item, plain)


Optimizers = Dict[str, Tuple[torch.optim.Optimizer, torch.nn.Module]]


def _state(modules: Dict[str, torch.nn.Module], optimizers: Optimizers) -> Dict[str, Any]:
    """DCP state dicts by key: each module's, and each optimizer's (by its module)."""
    out: Dict[str, Any] = {key: get_model_state_dict(m) for key, m in modules.items()}
    for key, (optim, module) in optimizers.items():
        out[key] = get_optimizer_state_dict(module, optim)
    return out


@contextlib.contextmanager
def _single_process_quiet() -> Iterator[bool]:
    """Yields ``no_dist``; DCP warns on every single-process call, which is intended here."""
    with warnings.catch_warnings():
        if not dist.is_initialized():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield not dist.is_initialized()


def save_dense(folder: Path, modules: Dict[str, torch.nn.Module], optimizers: Optimizers,
               group: Any) -> None:
    """Collective: writes ``modules`` and ``optimizers`` (``{key: (optimizer, its
    module)}``) into the DCP folder ``folder``, under their keys."""
    with _single_process_quiet() as no_dist:
        dcp.save(_state(modules, optimizers), checkpoint_id=str(folder), process_group=group,
                 no_dist=no_dist)


def _failure(folder: Path, exc: BaseException) -> CheckpointError:
    """A :class:`CheckpointError` naming ``folder`` for DCP's ``CheckpointException`` (a
    ``BaseException``, which ``except Exception`` misses) or another failure."""
    causes = [exc]
    if isinstance(exc, CheckpointException):
        causes = [f[0] if isinstance(f, tuple) else f for f in exc.failures.values()] or causes
    if any(isinstance(c, CheckpointError) for c in causes):
        return next(c for c in causes if isinstance(c, CheckpointError))
    cause = causes[0]
    return CheckpointError(f"{folder}: cannot be loaded ({type(cause).__name__}: {cause})")


def load_dense(folder: Path, modules: Dict[str, torch.nn.Module], optimizers: Optimizers,
               group: Any) -> None:
    """Collective: fills ``modules`` and ``optimizers`` from the DCP folder ``folder``.

    Raises:
        CheckpointError: naming the folder or file when it cannot be loaded (also for
            DCP's ``CheckpointException``).
    """
    state = _state(modules, optimizers)
    try:
        with _single_process_quiet() as no_dist:
            dcp.load(state, checkpoint_id=str(folder), process_group=group, no_dist=no_dist,
                     storage_reader=SafeReader(str(folder)),
                     planner=SafeLoadPlanner(folder))
        for key, module in modules.items():
            set_model_state_dict(module, state[key])
        for key, (optim, module) in optimizers.items():
            set_optimizer_state_dict(module, optim, optim_state_dict=state[key])
    except (Exception, CheckpointException) as exc:
        raise _failure(folder, exc) from None
