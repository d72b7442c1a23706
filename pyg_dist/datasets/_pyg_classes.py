"""Any ``torch_geometric.datasets`` class by name, without surprise downloads or writes.

PyG dataset classes download in their constructor when a raw file is missing, and
write ``processed/`` files next to the raw ones. :func:`load_pyg_dataset` constructs
the class through a thin guard subclass that

* checks the class's own ``raw_paths`` before anything is created or fetched: a
  missing file raises :class:`~pyg_dist.datasets._errors.MissingRawFilesError` naming
  the files and their folder, unless ``download=True`` (already processed files are
  enough: then nothing is downloaded and the raw files are not needed);
* lets PyG write ``processed/`` as usual when that folder is writable, and otherwise
  processes into a temporary folder that is removed once the graph is loaded, so a
  read-only ``root`` is never written to;
* loads ``processed/`` files with ``weights_only=True`` only (PyG's own loader falls
  back to an unrestricted pickle load, which would run code stored in a dataset folder
  from elsewhere): a file that needs more raises
  :class:`~pyg_dist.datasets._errors.DatasetError` naming it.

Names are matched case-insensitively (``reddit`` finds ``Reddit``); classes that take a
``name`` argument are written ``Class:name`` (``Amazon:Computers``, ``Coauthor:CS``).
"""
from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type, Union

import torch
from torch_geometric.data import Data, Dataset, HeteroData, TemporalData
from torch_geometric.io import fs
from torch_geometric.data.dataset import files_exist

from pyg_dist.datasets._errors import DatasetError, MissingRawFilesError

# constructor arguments pyg-dist-partition never passes (they all have defaults)
_OPTIONAL = {"self", "root", "name", "transform", "pre_transform", "pre_filter", "log",
             "force_reload"}


def find_pyg_class(spec: str) -> Optional[Type[Dataset]]:
    """The ``torch_geometric.datasets`` class named by ``spec`` (``Class`` or
    ``Class:name``, any case), or ``None`` if there is no such dataset class."""
    import torch_geometric.datasets as pyg_datasets

    wanted = spec.partition(":")[0].lower()
    for name in getattr(pyg_datasets, "__all__", []):
        cls = getattr(pyg_datasets, name, None)
        if (name.lower() == wanted and isinstance(cls, type) and issubclass(cls, Dataset)):
            return cls
    return None


def constructor_kwargs(cls: Type[Dataset], spec: str, root: Optional[Union[str, Path]]
                       ) -> Dict[str, Any]:
    """Keyword arguments to construct ``cls`` from ``spec`` and ``root``.

    Raises:
        DatasetError: if the class needs an argument that cannot be given here.
    """
    params = inspect.signature(cls.__init__).parameters
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = [n for n, p in params.items() if p.kind in plain and n not in _OPTIONAL
                and p.default is inspect.Parameter.empty]
    if required:
        raise DatasetError(f"{cls.__name__} needs argument(s) {', '.join(required)}, which "
                           f"pyg-dist-partition cannot pass; load it in Python, save the "
                           f"graph with torch.save(data.to_dict(), 'graph.pt') and pass that file")
    kwargs: Dict[str, Any] = {}
    _, has_name, name = spec.partition(":")
    if "name" in params:
        if not has_name and params["name"].default is inspect.Parameter.empty:
            raise DatasetError(f"{cls.__name__} needs a name: pass --dataset "
                               f"{cls.__name__}:<name> (see its PyG documentation)")
        if has_name:
            kwargs["name"] = name
    elif has_name:
        raise DatasetError(f"{cls.__name__} takes no name (got '{spec}')")
    if "root" in params:
        if root is None:
            raise DatasetError(f"--root is required for {cls.__name__} (the folder "
                               f"holding its raw/ files, as for PyG's {cls.__name__}(root))")
        kwargs["root"] = str(root)
    return kwargs


def _strict_torch_load(path: str, map_location: Any = None) -> Any:
    """PyG's ``fs.torch_load`` without its unrestricted-pickle fallback."""
    try:
        with torch.serialization.safe_globals([Data, HeteroData, TemporalData]):
            return torch.load(path, map_location, weights_only=True)
    except (RuntimeError, EOFError) as exc:  # a truncated or damaged archive
        raise DatasetError(f"{path} is damaged ({type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}); "
                           f"delete it to rebuild it from the raw files") from None
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DatasetError(f"{path} cannot be loaded safely (torch.load weights_only=True "
                           f"refused it: {first}); pyg_dist never unpickles dataset files. "
                           f"If you made it yourself, delete it to rebuild it from the raw "
                           f"files") from None


@contextlib.contextmanager
def _strict_pyg_loads() -> Iterator[None]:
    """While constructing a dataset, PyG's file loads are ``weights_only`` only."""
    original = fs.torch_load
    fs.torch_load = _strict_torch_load
    try:
        yield
    finally:
        fs.torch_load = original


def _writable(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` (or, if it does not exist, its nearest ancestor) is writable."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _guarded(cls: Type[Dataset], dataset: str, download: bool, made: List[str]
             ) -> Type[Dataset]:
    """A subclass of ``cls`` that never downloads unasked or writes to a read-only root.

    Temporary processing folders it creates are appended to ``made``.
    """

    class Guarded(cls):  # type: ignore[valid-type, misc]
        _pyg_dist_processed: Optional[str] = None

        @property
        def processed_dir(self) -> str:
            return self._pyg_dist_processed or super().processed_dir

        def _download(self) -> None:
            if download or files_exist(self.raw_paths):
                super()._download()
            elif not files_exist(self.processed_paths):
                raw_dir = Path(self.raw_dir)
                missing = [os.path.relpath(p, raw_dir) for p in self.raw_paths
                           if not Path(p).is_file()] or ["(the class lists no raw files)"]
                raise MissingRawFilesError(dataset, raw_dir, missing)

        def _process(self) -> None:
            if ((self.force_reload or not files_exist(self.processed_paths))
                    and not _writable(self.processed_dir)):
                warnings.warn(f"{self.processed_dir} is not writable: processing "
                              f"{dataset} in a temporary folder (not kept)", stacklevel=2)
                self._pyg_dist_processed = tempfile.mkdtemp(prefix="pyg_dist_processed_")
                made.append(self._pyg_dist_processed)
            super()._process()

    Guarded.__name__ = Guarded.__qualname__ = cls.__name__
    return Guarded


def load_pyg_dataset(spec: str, root: Optional[Union[str, Path]] = None,
                     download: bool = False) -> Union[Data, HeteroData]:
    """The one graph of the ``torch_geometric.datasets`` class ``spec`` names.

    Args:
        spec (str): ``Class`` or ``Class:name`` (e.g. ``Reddit``, ``Amazon:Computers``).
        root (str or Path, optional): the dataset folder, as for PyG's ``Class(root)``.
        download (bool): let PyG download missing raw files (default: never).

    Raises:
        DatasetError: unknown class, an argument that cannot be given, or a dataset of
            several graphs.
        MissingRawFilesError: raw files are missing and ``download`` is False.
    """
    cls = find_pyg_class(spec)
    if cls is None:
        raise DatasetError(f"'{spec}' is not a torch_geometric.datasets class")
    kwargs = constructor_kwargs(cls, spec, root)
    made: List[str] = []
    try:
        with _strict_pyg_loads():
            dataset = _guarded(cls, spec, download, made)(**kwargs)
        if len(dataset) != 1:
            raise DatasetError(f"{cls.__name__} holds {len(dataset)} graphs; "
                               f"pyg-dist-partition partitions a single graph")
        return dataset[0]
    except MissingRawFilesError:
        raise
    except OSError as exc:  # a failed download, an unreadable file: one line, the cause kept
        what = "downloading or reading" if download else "reading"
        raise DatasetError(f"{cls.__name__}: {what} its files under {root} failed: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                           ) from exc
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def pyg_class_names() -> Tuple[str, ...]:
    """Names of the dataset classes ``torch_geometric.datasets`` exports."""
    import torch_geometric.datasets as pyg_datasets

    return tuple(n for n in getattr(pyg_datasets, "__all__", [])
                 if isinstance(getattr(pyg_datasets, n, None), type)
                 and issubclass(getattr(pyg_datasets, n), Dataset))
