"""OGB node-property datasets (``ogbn-arxiv``, ``ogbn-products``, ``ogbn-mag``, ...).

Read with the ``ogb`` package's own raw readers (``pip install ogb``; optional) from
the folder OGB's ``PygNodePropPredDataset(name, root)`` uses, ``root/<name with _>``
(e.g. ``root/ogbn_arxiv/raw/edge.csv.gz`` and ``root/ogbn_arxiv/split/time/*.csv.gz``),
without processing them into a pickle and without writing anything. The official split
becomes boolean ``train_mask``/``val_mask``/``test_mask`` node attributes (of the node
types that have one), and single-task labels ``y`` are 1-D.

Nothing is downloaded unless ``download=True``; then the archive OGB publishes is
fetched into ``root`` with ogb's helpers and unpacked, as ogb itself does.
``ogbn-papers100M`` (OGB's binary layout) is too large for one process and is refused by
name: it goes through a chunked folder and ``pyg-dist-partition --memory-budget``.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets._errors import (DatasetError, MissingDependencyError,
                                      MissingRawFilesError, missing_files)

PAPERS100M = "ogbn-papers100M"
SPLITS = (("train", "train"), ("valid", "val"), ("test", "test"))  # OGB name, mask prefix


@dataclass(frozen=True)
class OgbInfo:
    """The row of ogb's ``nodeproppred/master.csv`` describing one dataset."""
    name: str
    dir_name: str
    url: str
    download_name: str
    add_inverse_edge: bool
    has_node_attr: bool
    has_edge_attr: bool
    split: str
    node_files: Tuple[str, ...]
    edge_files: Tuple[str, ...]
    is_hetero: bool
    binary: bool
    classification: bool


def is_ogb_name(name: str) -> bool:
    """Whether ``name`` names an OGB node dataset (``ogbn-*``)."""
    return name.lower().startswith("ogbn-")


@contextlib.contextmanager
def _no_version_check() -> Iterator[None]:
    """Imports of ``ogb`` without its PyPI version check (a network request in a thread)."""
    hidden = "outdated" not in sys.modules
    if hidden:
        sys.modules["outdated"] = None  # type: ignore[assignment]  # makes its import fail
    try:
        yield
    finally:
        if hidden and sys.modules.get("outdated", 0) is None:
            del sys.modules["outdated"]


def require_ogb(name: str) -> None:
    """Raises :class:`MissingDependencyError` (one line) if ``ogb`` is not installed."""
    try:
        with _no_version_check():
            importlib.import_module("ogb.io.read_graph_raw")
    except ImportError as exc:
        raise MissingDependencyError(f"{name} is read with the ogb package, which is not "
                                     f"installed: pip install ogb ({exc})") from exc


def ogb_info(name: str) -> OgbInfo:
    """The master-file entry of the OGB node dataset ``name`` (any case)."""
    if name.lower() == PAPERS100M.lower():
        raise NotImplementedError(
            f"{PAPERS100M} does not fit one process, and reading OGB's layout of it by name "
            f"is not implemented yet: write it as a chunked folder (metadata.json + .npy "
            f"chunks) and run pyg-dist-partition --input DIR --memory-budget SIZE")
    require_ogb(name)
    import pandas as pd

    spec = importlib.util.find_spec("ogb.nodeproppred")
    folder = Path(next(iter(spec.submodule_search_locations)))  # type: ignore[union-attr]
    master = pd.read_csv(folder / "master.csv", index_col=0, keep_default_na=False)
    names = {str(c).lower(): str(c) for c in master.columns}
    if name.lower() not in names:
        raise DatasetError(f"unknown OGB node dataset '{name}' (ogb {_ogb_version()} knows "
                           f"{', '.join(sorted(names.values()))})")
    row = master[names[name.lower()]]

    def files(key: str) -> Tuple[str, ...]:
        return () if row[key] == "None" else tuple(row[key].split(","))

    info = OgbInfo(name=names[name.lower()], dir_name=names[name.lower()].replace("-", "_"),
                   url=row["url"], download_name=row["download_name"],
                   add_inverse_edge=row["add_inverse_edge"] == "True",
                   has_node_attr=row["has_node_attr"] == "True",
                   has_edge_attr=row["has_edge_attr"] == "True", split=row["split"],
                   node_files=files("additional node files"),
                   edge_files=files("additional edge files"),
                   is_hetero=row["is hetero"] == "True", binary=row["binary"] == "True",
                   classification="classification" in row["task type"])
    if info.binary:
        raise NotImplementedError(f"{info.name} comes in OGB's binary layout for graphs "
                                  f"too large for one process; the chunked, bounded-memory "
                                  f"partitioning path is not implemented yet")
    return info


def _ogb_version() -> str:
    from ogb.version import __version__

    return __version__


def dataset_dir(root: Union[str, Path], info: OgbInfo) -> Path:
    """Where ogb keeps ``info``'s files under ``root`` (``<dir>_pyg`` if present, as ogb)."""
    root = Path(root)
    for folder in (root / f"{info.dir_name}_pyg", root / info.dir_name):
        if folder.is_dir():
            return folder
    if root.name in (info.dir_name, f"{info.dir_name}_pyg") and (root / "raw").is_dir():
        return root  # --root names the dataset folder itself
    return root / info.dir_name


def expected_files(info: OgbInfo) -> List[str]:
    """Files (relative to the dataset folder) every reader of ``info`` needs."""
    split = [f"split/{info.split}/{s}.csv.gz" for s, _ in SPLITS]
    if info.is_hetero:
        return ["raw/num-node-dict.csv.gz", "raw/triplet-type-list.csv.gz",
                "raw/nodetype-has-label.csv.gz", f"split/{info.split}/nodetype-has-split.csv.gz"]
    raw = ["edge", "num-node-list", "num-edge-list", "node-label"]
    raw += (["node-feat"] if info.has_node_attr else []) + (
        ["edge-feat"] if info.has_edge_attr else []) + list(info.node_files + info.edge_files)
    return [f"raw/{f}.csv.gz" for f in raw] + split


def _hetero_files(folder: Path, info: OgbInfo) -> List[str]:
    """Per-type files of a heterogeneous dataset, as its type lists name them."""
    import pandas as pd

    raw = folder / "raw"
    triplets = pd.read_csv(raw / "triplet-type-list.csv.gz", header=None).values.tolist()
    names = [f"raw/relations/{'___'.join(map(str, t))}/{f}.csv.gz" for t in triplets
             for f in ("edge", "num-edge-list")]
    for table, pattern in (("raw/nodetype-has-label.csv.gz", "raw/node-label/{t}/node-label"),
                           (f"split/{info.split}/nodetype-has-split.csv.gz", None)):
        has = pd.read_csv(folder / table)
        for t in [str(c) for c in has.columns if bool(has[c].values[0])]:
            names += ([pattern.format(t=t) + ".csv.gz"] if pattern else
                      [f"split/{info.split}/{t}/{s}.csv.gz" for s, _ in SPLITS])
    # per-type attribute files: ogb's reader skips absent ones, so at least one must exist
    optional = (["node-feat"] if info.has_node_attr else []) + list(info.node_files)
    patterns = [f"raw/node-feat/*/{f}.csv.gz" for f in optional] + [
        f"raw/relations/*/{f}.csv.gz" for f in info.edge_files]
    return names + [p for p in patterns if not any(folder.glob(p))]


def check_files(folder: Path, info: OgbInfo) -> None:
    """Raises :class:`MissingRawFilesError` naming every file of ``info`` not in ``folder``."""
    hint = "as ogb's PygNodePropPredDataset(name, root) lays them out, or pass --download"
    missing = missing_files(folder, expected_files(info))
    if not missing and info.is_hetero:
        missing = missing_files(folder, _hetero_files(folder, info))
    if missing:
        raise MissingRawFilesError(info.name, folder, missing, hint=hint)


def download(root: Path, info: OgbInfo, target: Path) -> None:
    """Fetches ``info``'s archive into ``root`` with ogb's helpers; unpacks it to ``target``.

    Raises:
        DatasetError: ``target`` holds files already (it is never replaced), or the
            download fails.
    """
    from ogb.utils import url as ogb_url

    if target.exists() and any(target.iterdir()):
        raise DatasetError(f"{target} exists but is incomplete; move it away and rerun "
                           f"with --download")
    root.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            archive = ogb_url.download_url(info.url, str(root))
            ogb_url.extract_zip(archive, str(root))
    except (OSError, RuntimeError) as exc:  # URLError is an OSError; ogb raises RuntimeError
        raise DatasetError(f"downloading {info.name} from {info.url} into {root} failed: "
                           f"{exc}") from exc
    os.unlink(archive)
    if target.exists():
        target.rmdir()  # empty (checked above)
    shutil.move(str(root / info.download_name), str(target))


def _labels(values: np.ndarray, info: OgbInfo) -> Tensor:
    """OGB's label rule (long for classification without NaN, else float), 1-D if one task."""
    y = torch.from_numpy(np.array(values))  # a writable copy
    y = y.long() if info.classification and not np.isnan(values).any() else y.float()
    return y.view(-1) if y.dim() == 2 and y.size(1) == 1 else y


def _split_masks(folder: Path, num_nodes: int) -> Dict[str, Tensor]:
    """``<split>_mask`` tensors from ``folder/{train,valid,test}.csv.gz``."""
    import pandas as pd

    masks = {}
    for ogb_name, prefix in SPLITS:
        path = folder / f"{ogb_name}.csv.gz"
        ids = torch.from_numpy(pd.read_csv(path, header=None).values[:, 0].astype(np.int64))
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
            raise DatasetError(f"{path} holds node ids outside [0, {num_nodes})")
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[ids] = True
        masks[f"{prefix}_mask"] = mask
    return masks


def _homo(folder: Path, info: OgbInfo) -> Data:
    import pandas as pd
    from ogb.io.read_graph_raw import read_csv_graph_raw

    graph = read_csv_graph_raw(str(folder / "raw"), info.add_inverse_edge,
                               additional_node_files=list(info.node_files),
                               additional_edge_files=list(info.edge_files))[0]
    n = int(graph["num_nodes"])
    data = Data(edge_index=torch.from_numpy(graph["edge_index"]), num_nodes=n)
    if graph["node_feat"] is not None:
        data.x = torch.from_numpy(graph["node_feat"])
    if graph["edge_feat"] is not None:
        data.edge_attr = torch.from_numpy(graph["edge_feat"])
    for key in info.node_files + info.edge_files:
        data[key] = torch.from_numpy(graph[key])
    label = pd.read_csv(folder / "raw" / "node-label.csv.gz", header=None).values
    data.y = _labels(label, info)
    for key, mask in _split_masks(folder / "split" / info.split, n).items():
        data[key] = mask
    return data


def _hetero(folder: Path, info: OgbInfo) -> HeteroData:
    from ogb.io.read_graph_raw import read_csv_heterograph_raw, read_node_label_hetero

    raw = str(folder / "raw")
    graph = read_csv_heterograph_raw(raw, info.add_inverse_edge,
                                     additional_node_files=list(info.node_files),
                                     additional_edge_files=list(info.edge_files))[0]
    data = HeteroData()
    for node_type, n in graph["num_nodes_dict"].items():
        data[node_type].num_nodes = int(n)
    for node_type, x in (graph["node_feat_dict"] or {}).items():
        data[node_type].x = torch.from_numpy(x)
    for edge_type, index in graph["edge_index_dict"].items():
        data[tuple(edge_type)].edge_index = torch.from_numpy(index)
    for edge_type, attr in (graph["edge_feat_dict"] or {}).items():
        data[tuple(edge_type)].edge_attr = torch.from_numpy(attr)
    for key in info.node_files + info.edge_files:
        for group, value in graph[key].items():
            data[tuple(group) if isinstance(group, tuple) else group][key] = \
                torch.from_numpy(value)
    for node_type, label in read_node_label_hetero(raw).items():
        data[node_type].y = _labels(label, info)
    split = folder / "split" / info.split
    for node_type in data.node_types:
        if (split / node_type / "train.csv.gz").is_file():
            for key, mask in _split_masks(split / node_type, data[node_type].num_nodes).items():
                data[node_type][key] = mask
    return data


def load_ogb_node(name: str, root: Union[str, Path], download_missing: bool = False
                  ) -> Union[Data, HeteroData]:
    """The graph of the OGB node dataset ``name`` under ``root``, with split masks.

    Args:
        name (str): e.g. ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-mag`` (any case).
        root (str or Path): the folder given to ogb's ``PygNodePropPredDataset`` as
            ``root`` (holding ``ogbn_arxiv/`` etc.), or that dataset folder itself.
        download_missing (bool): fetch the dataset when its files are missing.

    Raises:
        MissingDependencyError: ``ogb`` is not installed.
        MissingRawFilesError: files are missing and ``download_missing`` is False.
        NotImplementedError: for ``ogbn-papers100M`` (needs the chunked path).
    """
    info = ogb_info(name)
    folder = dataset_dir(root, info)
    try:
        check_files(folder, info)
    except MissingRawFilesError:
        if not download_missing:
            raise
        download(Path(root), info, folder)
        check_files(folder, info)
    with _no_version_check(), contextlib.redirect_stdout(sys.stderr):  # ogb prints
        return _hetero(folder, info) if info.is_hetero else _homo(folder, info)
