"""Per-partition stores implementing PyG's ``GraphStore`` / ``FeatureStore``."""
from pyg_dist.store.feature_store import LocalFeatureStore
from pyg_dist.store.graph_store import CSC, LocalGraphStore

__all__ = ["LocalGraphStore", "LocalFeatureStore", "CSC"]
