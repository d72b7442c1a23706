"""Out-of-core partitioning of a chunked graph within a memory budget (one machine)."""
from pyg_dist.partition._outofcore.budget import MemoryBudgetError, parse_size
from pyg_dist.partition._outofcore.outofcore_partitioner import OutOfCorePartitioner

__all__ = ["OutOfCorePartitioner", "MemoryBudgetError", "parse_size"]
