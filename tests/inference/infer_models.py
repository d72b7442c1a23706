"""Models and reference outputs shared by the inference tests."""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from pyg_dist.datasets.synthetic import community_graph

MODELS: List[Tuple[str, type, dict]] = [
    ("gcn", GCN, {}),
    ("gcn_improved", GCN, {"improved": True}),
    ("sage", GraphSAGE, {}),
    ("gin", GIN, {}),
    ("gat", GAT, {"heads": 2}),
    ("sage_jk_bn", GraphSAGE, {"jk": "last", "norm": "batch_norm"}),
]


def build(name: str, in_dim: int, out_dim: int = 5) -> torch.nn.Module:
    """A deterministic model (the same on every rank)."""
    cls, kwargs = {n: (c, k) for n, c, k in MODELS}[name]
    torch.manual_seed(sum(map(ord, name)))
    model = cls(in_dim, 12, 3, out_channels=out_dim, **kwargs)
    for norm in getattr(model, "norms", []):
        inner = getattr(norm, "module", None)
        if inner is not None:  # running statistics that are not the identity
            inner.running_mean.uniform_(-1, 1)
            inner.running_var.uniform_(0.5, 2.0)
    return model.eval()


def references(data: Data, names: List[str]) -> Dict[str, torch.Tensor]:
    """Full-batch single-machine outputs, by original node id."""
    with torch.no_grad():
        return {n: build(n, data.num_features)(data.x, data.edge_index) for n in names}


def generated_graph() -> Data:
    """A community graph with a few self loops, repeated edges and isolated nodes."""
    data = community_graph(600, avg_degree=6, feat_dim=8, num_classes=4, seed=3)
    loops = torch.arange(0, 600, 37)
    extra = torch.cat([torch.stack([loops, loops]), data.edge_index[:, :20]], dim=1)
    data.edge_index = torch.cat([data.edge_index, extra], dim=1)
    return data
