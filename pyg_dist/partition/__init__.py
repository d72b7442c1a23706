"""Offline partitioning and the versioned on-disk format."""
from pyg_dist.partition.book import RangeBook
from pyg_dist.partition.id_maps import read_id_map, read_part_ids
from pyg_dist.partition.meta import FORMAT, VERSION, PartitionFormatError, PartitionMeta
from pyg_dist.partition.partitioner import Partitioner

__all__ = ["RangeBook", "PartitionMeta", "PartitionFormatError", "Partitioner", "FORMAT",
           "VERSION", "read_id_map", "read_part_ids"]
