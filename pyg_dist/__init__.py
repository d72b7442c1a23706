"""pyg_dist: distributed training for PyTorch Geometric.

Partition a graph offline (:class:`Partitioner` or ``pyg-dist-partition``), load one
partition per machine (:class:`LocalGraphStore`, :class:`LocalFeatureStore`), and
train with :class:`DistNeighborLoader` under ``torchrun``.

The names below are imported from their packages on first use: ``import pyg_dist`` (and
every command-line tool, which imports it as the package of its module) imports neither
torch_geometric nor torch until a name that needs them is used.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any, Dict, List

from pyg_dist.errors import PygDistError

if TYPE_CHECKING:  # what static checkers and IDEs see; at run time: __getattr__
    from pyg_dist.embedding import DistEmbedding, DistTensor, SparseAdagrad, SparseAdam
    from pyg_dist.inference import infer
    from pyg_dist.loader import (DistGraph, DistLinkNeighborLoader, DistNeighborLoader,
                                 edge_split, node_split)
    from pyg_dist.format import PartitionFormatError, PartitionMeta, RangeBook, read_meta
    from pyg_dist.partition import Partitioner
    from pyg_dist._progress import track
    from pyg_dist.rpc import (DisagreementError, DistContext, PeerFailedError, RpcPeerError,
                              init_process_group, shutdown_rpc)
    from pyg_dist.sampler import DistNeighborSampler, init_rpc
    from pyg_dist.store import LocalFeatureStore, LocalGraphStore

__version__ = "0.1.0"

#: the package (or module) that defines each public name, imported on the name's first use
_HOMES: Dict[str, str] = {
    **dict.fromkeys(["DistEmbedding", "DistTensor", "SparseAdagrad", "SparseAdam"],
                    "pyg_dist.embedding"),
    "infer": "pyg_dist.inference",
    **dict.fromkeys(["DistGraph", "DistLinkNeighborLoader", "DistNeighborLoader", "edge_split",
                     "node_split"], "pyg_dist.loader"),
    **dict.fromkeys(["PartitionFormatError", "PartitionMeta", "RangeBook", "read_meta"],
                    "pyg_dist.format"),
    "Partitioner": "pyg_dist.partition",
    "track": "pyg_dist._progress",
    **dict.fromkeys(["DisagreementError", "DistContext", "PeerFailedError", "RpcPeerError",
                     "init_process_group", "shutdown_rpc"], "pyg_dist.rpc"),
    **dict.fromkeys(["DistNeighborSampler", "init_rpc"], "pyg_dist.sampler"),
    **dict.fromkeys(["LocalFeatureStore", "LocalGraphStore"], "pyg_dist.store"),
}


def __getattr__(name: str) -> Any:
    """Imports a public name's package on first use (PEP 562) and keeps the name here;
    a subpackage (``pyg_dist.checkpoint`` after ``import pyg_dist``) is imported too, as
    when this package imported every subpackage itself."""
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}"):
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later uses skip this function
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    "PygDistError",
    "Partitioner", "PartitionMeta", "PartitionFormatError", "RangeBook", "read_meta",
    "LocalGraphStore", "LocalFeatureStore",
    "DistContext", "init_process_group", "init_rpc", "shutdown_rpc",
    "DisagreementError", "PeerFailedError", "RpcPeerError",
    "DistNeighborSampler", "DistNeighborLoader", "DistGraph", "DistLinkNeighborLoader",
    "node_split", "edge_split",
    "DistTensor", "DistEmbedding", "SparseAdagrad", "SparseAdam",
    "infer", "track",
]
