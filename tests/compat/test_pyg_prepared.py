"""Data prepared PyG's way (label.pt over all nodes in dataset order, split files in dataset
ids, written by a mirror of PyG's ``partition_graph.py``) trains as well as the same job in
pyg_dist's own style. Before ids at the API became the dataset's, the PyG-style job read
every id in pyg_dist's relabelled space and trained at chance."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch
from torch_geometric.data import Data

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      Partitioner, node_split, shutdown_rpc)
from pyg_dist.testing import run_ranks
from tests.support.pyg_prep import write_pyg_node_files

CLASSES, NODES, NAME = 8, 800, "toy"


def _graph(seed: int = 0) -> Data:
    """Features reveal the label, so accuracy is near 1 when labels line up with the
    nodes and 1/CLASSES when they do not."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (NODES,), generator=gen)
    x = torch.nn.functional.one_hot(y, CLASSES).float() * 2 + \
        0.3 * torch.randn(NODES, CLASSES, generator=gen)
    edge_index = torch.randint(0, NODES, (2, NODES * 4), generator=gen)
    train = torch.rand(NODES, generator=gen) < 0.6
    return Data(x=x, y=y, edge_index=edge_index, train_mask=train, test_mask=~train)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Tuple[str, str]:
    out = tmp_path_factory.mktemp("pyg_prepared")
    parts = out / f"{NAME}-partitions"
    data = _graph()
    Partitioner(data, 2, parts, progress=False).generate()
    write_pyg_node_files(data, parts, out, NAME)
    return str(parts), str(out)


def _train(parts: str, out: str, style: str, ctx: DistContext) -> Tuple[int, int]:
    """Trains a linear model on the seeds' features; returns (correct, total) on test."""
    feature = LocalFeatureStore.from_partition(parts, ctx.rank)
    graph = LocalGraphStore.from_partition(parts, ctx.rank)
    data = (feature, graph)
    if style == "pyg":  # as PyG's node_ogb_cpu.py loads its files
        feature.labels = torch.load(Path(out) / f"{NAME}-label" / "label.pt")
        train = torch.load(Path(out) / f"{NAME}-train-partitions" / f"partition{ctx.rank}.pt")
        test = torch.load(Path(out) / f"{NAME}-test-partitions" / f"partition{ctx.rank}.pt")
    else:
        train, test = node_split(data, "train", ctx), node_split(data, "test", ctx)
    torch.manual_seed(0)
    model = torch.nn.Linear(CLASSES, CLASSES)
    optim = torch.optim.Adam(model.parameters(), lr=0.05)
    loader = DistNeighborLoader(data, [2], input_nodes=train, batch_size=64, shuffle=True,
                                current_ctx=ctx)
    for _ in range(2):
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch.x[:batch.batch_size]),
                                                     batch.y[:batch.batch_size])
            optim.zero_grad()
            loss.backward()
            optim.step()
    loader.close()
    correct = total = 0
    test_loader = DistNeighborLoader(data, [2], input_nodes=test, batch_size=128,
                                     even_batches=False, current_ctx=ctx)
    with torch.no_grad():
        for batch in test_loader:
            pred = model(batch.x[:batch.batch_size]).argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    test_loader.close()
    return correct, total


def _both(parts: str, out: str) -> Dict[str, Tuple[int, int]]:
    """The same job in both styles, in one RPC session."""
    ctx = DistContext.from_env(rpc_timeout=60)
    try:
        return {style: _train(parts, out, style, ctx) for style in ("ours", "pyg")}
    finally:
        shutdown_rpc()


def _accuracy(results: List[Dict[str, Tuple[int, int]]], style: str) -> float:
    return sum(r[style][0] for r in results) / sum(r[style][1] for r in results)


@pytest.mark.multiprocess
@pytest.mark.timeout(700)
def test_pyg_prepared_node_files_train_like_our_style(prepared):
    parts, out = prepared
    results = run_ranks(_both, 2, parts, out, timeout=400)
    ours, theirs = _accuracy(results, "ours"), _accuracy(results, "pyg")
    assert ours > 0.9, ours  # the graph is learnable
    assert abs(theirs - ours) <= 0.02, (theirs, ours)
