"""Models and reference outputs shared by the inference tests."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import GATConv, GraphConv, HeteroConv, SAGEConv, to_hetero
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from pyg_dist.datasets import community_graph
from pyg_dist.format import read_id_map
from pyg_dist.inference import LayerwiseSpec

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


# ---- heterogeneous ------------------------------------------------------------------
class SageRes(torch.nn.Module):
    """SAGE, relu, SAGE plus a residual, a linear layer: written homogeneous, run through
    ``to_hetero`` as PyG's examples do."""

    def __init__(self, in_dim: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv((in_dim, in_dim), 16), SAGEConv((16, 16), 16)
        self.lin = torch.nn.Linear(16, 4)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.lin(self.conv2(x, edge_index) + x)


class EncodeGat(torch.nn.Module):
    """A per-type encoder before the first layer (a stage without edges), then GAT."""

    def __init__(self, in_dim: int) -> None:
        super().__init__()
        self.enc = torch.nn.Linear(in_dim, 12)
        self.conv1 = GATConv((12, 12), 6, heads=2, add_self_loops=False)
        self.conv2 = GATConv((12, 12), 5, heads=1, add_self_loops=False)

    def forward(self, x, edge_index):
        x = self.enc(x).tanh()
        return self.conv2(torch.nn.functional.elu(self.conv1(x, edge_index)), edge_index)


class HeteroConvNet(torch.nn.Module):
    """A user model of HeteroConv layers describing itself (the LayerwiseSpec protocol)."""

    def __init__(self, metadata, in_dim: int) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList([
            HeteroConv({et: SAGEConv((in_dim, in_dim), 10) for et in metadata[1]}, aggr="max"),
            HeteroConv({et: GraphConv((10, 10), 3) for et in metadata[1]}, aggr="mean")])

    def forward(self, x_dict, edge_index_dict):
        x_dict = {t: x.relu() for t, x in self.convs[0](x_dict, edge_index_dict).items()}
        return {t: x.log_softmax(-1) for t, x in self.convs[1](x_dict, edge_index_dict).items()}

    def layerwise_spec(self) -> LayerwiseSpec:
        def after(i, x_dict):
            return {t: x.relu() if i == 0 else x.log_softmax(-1) for t, x in x_dict.items()}
        return LayerwiseSpec(list(self.convs), after=after)


HETERO = {"sage_res": (SageRes, "sum"), "encode_gat": (EncodeGat, "mean"),
          "heteroconv": (None, None)}


def build_hetero(name: str, metadata, in_dim: int = 8) -> torch.nn.Module:
    """A deterministic heterogeneous model (the same on every rank)."""
    torch.manual_seed(sum(map(ord, name)))
    cls, aggr = HETERO[name]
    if cls is None:
        return HeteroConvNet(metadata, in_dim).eval()
    return to_hetero(cls(in_dim), metadata, aggr=aggr).eval()


def hetero_references(data: HeteroData, names: List[str]) -> Dict[str, Dict[str, torch.Tensor]]:
    """Full-batch single-machine outputs per node type, by original node id."""
    with torch.no_grad():
        return {n: build_hetero(n, data.metadata())(data.x_dict, data.edge_index_dict)
                for n in names}


def hetero_expected(data: HeteroData, root: Path, names: List[str]
                    ) -> Dict[str, Dict[str, torch.Tensor]]:
    """:func:`hetero_references` by relabelled id of the partitioning in ``root`` (the
    rows inference returns)."""
    id_map = read_id_map(root)
    return {n: {t: ref[id_map[t]] for t, ref in refs.items()}
            for n, refs in hetero_references(data, names).items()}
