"""Offline partitioning: one pipeline from a graph (in memory, chunked, or over several
machines) to a partition folder.

:func:`partition` is the entry: it picks the mode from its arguments and environment.
The folder's format lives in :mod:`pyg_dist.format`.
"""
from pyg_dist.partition._api import PartitionResult, partition
from pyg_dist.partition._partitioner import Partitioner

__all__ = ["Partitioner", "partition", "PartitionResult"]
