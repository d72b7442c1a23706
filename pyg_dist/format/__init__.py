"""The on-disk format: META, typed schema, id maps, validation, digests, manifests, file helpers.

Everything that reads or writes a partition folder goes through this package; it imports
nothing from the rest of pyg_dist except :mod:`pyg_dist._typing` and :mod:`pyg_dist.errors`.
"""
from pyg_dist.format._book import RangeBook
from pyg_dist.format._id_maps import read_id_map, read_part_ids
from pyg_dist.format._partition_io import read_meta
from pyg_dist.format._meta import FORMAT, VERSION, PartitionFormatError, PartitionMeta

__all__ = ["RangeBook", "PartitionMeta", "PartitionFormatError", "FORMAT", "VERSION",
           "read_id_map", "read_part_ids", "read_meta"]
