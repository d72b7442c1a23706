"""Offline partitioning and the versioned on-disk format."""
from pyg_dist.partition.book import RangeBook
from pyg_dist.partition.meta import FORMAT, VERSION, PartitionFormatError, PartitionMeta
from pyg_dist.partition.partitioner import Partitioner

__all__ = ["RangeBook", "PartitionMeta", "PartitionFormatError", "Partitioner", "FORMAT",
           "VERSION"]
