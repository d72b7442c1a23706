"""Partitioning a chunked graph with several ranks (machines) under ``torchrun``."""
from pyg_dist.partition.distributed.comm import Comm
from pyg_dist.partition.distributed.partitioner import DistPartitioner, writer_of

__all__ = ["Comm", "DistPartitioner", "writer_of"]
