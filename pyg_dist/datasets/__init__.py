"""Graphs to partition, loaded by name: Planetoid (from its raw files), OGB node datasets,
any ``torch_geometric.datasets`` class, and community-structured synthetic graphs.

:func:`load_named` is what ``pyg-dist-partition --dataset NAME`` calls;
:func:`community_graph` and :func:`hetero_community_graph` build the synthetic graphs the
benchmarks use.
"""
from pyg_dist.datasets._by_name import DatasetError, MissingRawFilesError, load_named
from pyg_dist.datasets._synthetic import community_graph, hetero_community_graph

__all__ = ["load_named", "community_graph", "hetero_community_graph", "DatasetError",
           "MissingRawFilesError"]
