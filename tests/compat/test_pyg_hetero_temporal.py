"""PyG's heterogeneous and temporal link-prediction script styles, with data prepared PyG's
way in dataset ids (:mod:`tests.support.pyg_prep`): the lines those scripts run, with
only the imports changed, give batches in dataset ids with the right labels, and temporal
batches never hold an edge newer than its seed edge.

Before ids at the API were the dataset's, the temporal style stopped at once
(``feature.labels = <per-edge labels>`` raised ``ValueError``) and the hetero style read
``('paper', ids)`` and ``label.pt`` in pyg_dist's relabelled ids (wrong nodes, wrong y).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader,
                      LocalFeatureStore, LocalGraphStore, Partitioner, shutdown_rpc)
from pyg_dist.testing import run_ranks
from pyg_dist.testing import encode_ids
from tests.support.pyg_prep import write_pyg_link_files, write_pyg_node_files

RATES = ("user", "rates", "movie")


class GNN(torch.nn.Module):
    """A homogeneous model, as PyG's hetero examples write it before ``to_hetero``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = SAGEConv((-1, -1), 3)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv(x, edge_index)


def _movies(seed: int = 0) -> HeteroData:
    gen = torch.Generator().manual_seed(seed)
    users, movies, edges = 80, 50, 700
    data = HeteroData()
    data["user"].x = torch.randn(users, 4, generator=gen)
    data["movie"].x = torch.randn(movies, 4, generator=gen)
    index = torch.stack([torch.randint(0, users, (edges,), generator=gen),
                         torch.randint(0, movies, (edges,), generator=gen)])
    time = torch.randint(0, 1000, (edges,), generator=gen)
    data[RATES].edge_index, data[RATES].edge_time = index, time
    data[RATES].edge_label = torch.randint(0, 5, (edges,), generator=gen)
    data["movie", "rev_rates", "user"].edge_index = index.flip(0)
    data["movie", "rev_rates", "user"].edge_time = time
    return encode_ids(data)


def _hetero_style(parts: str, out: str, ctx: DistContext, graph_data: HeteroData) -> int:
    """The lines of PyG's hetero node script (node_ogb_cpu.py with ogbn-mag)."""
    graph = LocalGraphStore.from_partition(parts, ctx.rank)
    feature = LocalFeatureStore.from_partition(parts, ctx.rank)
    feature.labels = torch.load(Path(out) / "mag-label" / "label.pt")
    train_idx = torch.load(Path(out) / "mag-train-partitions" / f"partition{ctx.rank}.pt")
    node_types = graph.meta["node_types"]
    assert "paper" in node_types
    loader = DistNeighborLoader((feature, graph), [3, 2], input_nodes=("paper", train_idx),
                                batch_size=16, current_ctx=ctx, even_batches=False)
    model = None
    checked = 0
    for batch in loader:
        paper = batch["paper"]
        n = paper.batch_size
        assert torch.equal(paper.n_id[:n], train_idx[checked:checked + n])  # dataset ids
        for t in batch.node_types:
            assert torch.equal(batch[t].n_id, batch[t].nid)
        assert torch.equal(paper.y[:n], graph_data["paper"].y[paper.n_id[:n]])
        if model is None:  # PyG's to_hetero over the batch's metadata
            model = to_hetero(GNN(), batch.metadata(), aggr="sum")
        out_ = model(batch.x_dict, batch.edge_index_dict)["paper"][:n]
        out_.sum().backward()
        checked += n
    loader.close()
    return checked


def _temporal_style(parts: str, out: str, ctx: DistContext) -> Dict[str, int]:
    """The lines of PyG's temporal link script (temporal_link_movielens_cpu.py)."""
    graph = LocalGraphStore.from_partition(parts, ctx.rank)
    feature = LocalFeatureStore.from_partition(parts, ctx.rank)
    feature.labels = torch.load(Path(out) / "movielens-label" / "label.pt")  # per edge
    train = torch.load(Path(out) / "movielens-train-partitions" / f"partition{ctx.rank}.pt")
    loader = DistLinkNeighborLoader(
        data=(feature, graph), num_neighbors=[4, 3],
        edge_label_index=(RATES, train["edge_label_index"]),
        edge_label=train["edge_label"], edge_label_time=train["edge_label_time"],
        batch_size=32, shuffle=False, disjoint=True, time_attr="edge_time",
        temporal_strategy="last", current_ctx=ctx, even_batches=False)
    seen = edges = 0
    for batch in loader:
        label = batch[RATES]
        ends = torch.stack([batch["user"].n_id[label.edge_label_index[0]],
                            batch["movie"].n_id[label.edge_label_index[1]]])
        pos = label.input_id
        assert torch.equal(ends, train["edge_label_index"][:, pos])  # dataset ids
        assert torch.equal(label.edge_label, train["edge_label"][pos])
        for t in batch.edge_types:
            dst_batch = batch[t[2]].batch[batch[t].edge_index[1]]
            seed_time = label.edge_label_time[dst_batch]
            assert bool((batch[t].edge_time <= seed_time).all()), t  # never newer
            assert torch.equal(batch[t].e_id, batch[t].oid)
            edges += batch[t].e_id.numel()
        seen += pos.numel()
    loader.close()
    return {"seen": seen, "seeds": train["edge_label"].numel(), "edges": edges}


def _hetero_job(parts: str, out: str, graph_data: HeteroData) -> int:
    try:
        return _hetero_style(parts, out, DistContext.from_env(rpc_timeout=60), graph_data)
    finally:
        shutdown_rpc()


def _temporal_job(parts: str, out: str) -> Dict[str, int]:
    try:
        return _temporal_style(parts, out, DistContext.from_env(rpc_timeout=60))
    finally:
        shutdown_rpc()


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_hetero_pyg_style(hetero_graph, tmp_path):
    mag = encode_ids(hetero_graph)
    Partitioner(mag, 2, tmp_path / "mag-partitions", seed=0, progress=False).generate()
    write_pyg_node_files(mag, tmp_path / "mag-partitions", tmp_path, "mag", "paper")
    out = run_ranks(_hetero_job, 2, str(tmp_path / "mag-partitions"), str(tmp_path), mag,
                    timeout=350)
    assert sum(out) == int(mag["paper"].train_mask.sum())


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_temporal_link_pyg_style(tmp_path):
    movies = _movies()
    link_root = tmp_path / "ml"
    Partitioner(movies, 2, link_root / "movielens-partitions", seed=0,
                progress=False).generate()
    masks = {"train": torch.ones(movies[RATES].edge_index.size(1), dtype=torch.bool)}
    write_pyg_link_files(movies, link_root / "movielens-partitions", link_root, "movielens",
                         RATES, "edge_time", masks)
    out = run_ranks(_temporal_job, 2, str(link_root / "movielens-partitions"),
                    str(link_root), timeout=350)
    assert sum(o["seen"] for o in out) == movies[RATES].edge_index.size(1)
    assert all(o["seen"] == o["seeds"] for o in out)
    assert sum(o["edges"] for o in out) > 0
