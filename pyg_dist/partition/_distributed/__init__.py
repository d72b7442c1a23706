"""Partitioning a chunked graph with several ranks (machines) under ``torchrun``."""
from pyg_dist.partition._distributed.comm import ArrayComm
from pyg_dist.partition._distributed.dist_partitioner import DistPartitioner
from pyg_dist.partition._distributed.team import writer_of

__all__ = ["ArrayComm", "DistPartitioner", "writer_of"]
