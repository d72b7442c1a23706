"""Offline partitioning: from a graph (in memory, chunked, or over several machines) to a folder.

The folder's format lives in :mod:`pyg_dist.format`.
"""
from pyg_dist.partition.partitioner import Partitioner

__all__ = ["Partitioner"]
