"""Partitioning a chunked graph with several ranks (machines) under ``torchrun``."""
from pyg_dist.partition.distributed.comm import ArrayComm
from pyg_dist.partition.distributed.partitioner import DistPartitioner
from pyg_dist.partition.distributed.team import writer_of

__all__ = ["ArrayComm", "DistPartitioner", "writer_of"]
