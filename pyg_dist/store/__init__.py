"""Per-partition stores implementing PyG's ``GraphStore`` / ``FeatureStore``."""
from pyg_dist.store._feature_store import LocalFeatureStore
from pyg_dist.store._graph_store import CSC, LocalGraphStore

__all__ = ["LocalGraphStore", "LocalFeatureStore", "CSC"]
