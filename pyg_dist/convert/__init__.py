"""Converting partition folders written by other systems into pyg_dist's format.

:func:`convert_pyg_partitions` (CLI ``pyg-dist-convert``) converts a
``torch_geometric.distributed`` folder without repartitioning.
"""
from pyg_dist.convert._extras import PygExtras
from pyg_dist.convert._pickles import PickleLoader, PygFormatError, UntrustedPickleError
from pyg_dist.convert._pyg import ConvertResult, convert_pyg_partitions

__all__ = ["convert_pyg_partitions", "ConvertResult", "PygFormatError", "UntrustedPickleError",
           "PickleLoader", "PygExtras"]
