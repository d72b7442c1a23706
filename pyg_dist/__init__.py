"""pyg_dist: distributed training for PyTorch Geometric.

Partition a graph offline (:class:`Partitioner` or ``pyg-dist-partition``), load one
partition per machine (:class:`LocalGraphStore`, :class:`LocalFeatureStore`), and
train with :class:`DistNeighborLoader` under ``torchrun``.
"""
from pyg_dist.errors import PygDistError
from pyg_dist.embedding import DistEmbedding, DistTensor, SparseAdagrad, SparseAdam
from pyg_dist.inference import infer
from pyg_dist.loader import (DistGraph, DistLinkNeighborLoader, DistNeighborLoader, edge_split,
                             node_split)
from pyg_dist.format import PartitionFormatError, PartitionMeta, RangeBook, read_meta
from pyg_dist.partition import Partitioner
from pyg_dist._progress import track
from pyg_dist.rpc import (DisagreementError, DistContext, PeerFailedError, RpcPeerError,
                          init_process_group, shutdown_rpc)
from pyg_dist.sampler import DistNeighborSampler, init_rpc
from pyg_dist.store import LocalFeatureStore, LocalGraphStore

__version__ = "0.1.0"

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
