"""Distributed tensors, learnable node embeddings and sparse optimizers.

Importing this package registers the RPC callees that serve rows to peers
(``embedding.read``, ``embedding.write``) and does nothing else.
"""
from pyg_dist.embedding._checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from pyg_dist.embedding._embedding import DistEmbedding
from pyg_dist.embedding._optim import SparseAdagrad, SparseAdam, SparseOptimizer
from pyg_dist.embedding._tensor import DistTensor

__all__ = ["DistTensor", "DistEmbedding", "SparseAdagrad", "SparseAdam", "SparseOptimizer",
           "save_checkpoint", "load_checkpoint", "CheckpointError"]
