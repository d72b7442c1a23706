"""PyG-style loaders over a partitioned graph, and per-rank seed splits."""
from pyg_dist.loader._graph_view import DistGraph
from pyg_dist.loader._link_loader import DistLinkNeighborLoader
from pyg_dist.loader._node_loader import DistNeighborLoader
from pyg_dist.loader._seeds import edge_split, node_split

__all__ = ["DistGraph", "DistNeighborLoader", "DistLinkNeighborLoader", "node_split", "edge_split"]
