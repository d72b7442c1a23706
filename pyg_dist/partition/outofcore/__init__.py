"""Out-of-core partitioning of a chunked graph within a memory budget (one machine)."""
from pyg_dist.partition.outofcore.budget import MemoryBudgetError, parse_size
from pyg_dist.partition.outofcore.partitioner import OutOfCorePartitioner

__all__ = ["OutOfCorePartitioner", "MemoryBudgetError", "parse_size"]
