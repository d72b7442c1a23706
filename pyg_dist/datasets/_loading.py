"""Reading the graphs the partition CLI accepts: Planetoid raw files and saved graphs."""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Union

import torch
from torch_geometric.data import Data, HeteroData

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
_RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def planetoid_name(name: str) -> str:
    """The canonical Planetoid name (``Cora``, ``CiteSeer``, ``PubMed``) of ``name``."""
    canonical = PLANETOID.get(name.lower())
    if canonical is None:
        raise ValueError(f"unknown Planetoid dataset '{name}' "
                         f"(choose from {', '.join(PLANETOID.values())})")
    return canonical


def load_planetoid(root: Union[str, Path], name: str) -> Data:
    """Reads ``root/<Name>/raw/ind.<name>.*`` (PyG's Planetoid layout) without writing.

    Raises:
        FileNotFoundError: naming the first raw file that is missing.
    """
    from torch_geometric.io import read_planetoid_data

    canonical = planetoid_name(name)
    raw = Path(root) / canonical / "raw"
    for suffix in _RAW_SUFFIXES:
        path = raw / f"ind.{canonical.lower()}.{suffix}"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: expected PyG's Planetoid raw layout "
                                    f"{Path(root)}/{canonical}/raw/ind.{canonical.lower()}.* "
                                    f"(or pass --download to fetch it)")
    return read_planetoid_data(str(raw), canonical.lower())


def load_graph_file(path: Union[str, Path]) -> Union[Data, HeteroData]:
    """Loads a ``Data``/``HeteroData`` saved with ``torch.save`` (or its ``to_dict()``).

    Loading uses ``weights_only=True`` with only PyG's plain data containers
    allow-listed, so the file cannot run code.
    """
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import (AttrType, BaseStorage, EdgeStorage,
                                              GlobalStorage, NodeStorage)

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"graph file {path} does not exist")
    # AttrType (an Enum) appears in storages whose attribute cache PyG has filled
    # (any Data that was indexed or inspected before it was saved).
    allowed = [Data, HeteroData, DataEdgeAttr, DataTensorAttr, BaseStorage, EdgeStorage,
               GlobalStorage, NodeStorage, AttrType]
    try:
        with torch.serialization.safe_globals(allowed):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "defaultdict" in str(exc):  # PyG's per-storage attribute cache
            raise ValueError(
                f"{path} holds a graph whose attribute cache PyG filled before it was "
                f"saved (a defaultdict, which weights_only loading refuses); save "
                f"`graph.to_dict()` instead and pass that file") from None
        raise ValueError(f"{path} cannot be loaded safely (torch.load weights_only=True): "
                         f"{str(exc).splitlines()[0]}") from None
    if isinstance(obj, (Data, HeteroData)):
        return obj
    if isinstance(obj, dict) and "edge_index" in obj:
        return Data.from_dict(obj)
    if isinstance(obj, dict):
        return HeteroData.from_dict(obj)
    raise ValueError(f"{path} holds a {type(obj).__name__}, not a Data/HeteroData")
