"""Ids at the API boundary are the dataset's: translation tables against the id maps, and
every wrong id input raising an error that names the argument (one process)."""
from __future__ import annotations

import pytest
import torch

from pyg_dist import (DistContext, DistLinkNeighborLoader, DistNeighborLoader,
                      LocalFeatureStore, LocalGraphStore, Partitioner, node_split, shutdown_rpc)
from pyg_dist.loader._id_collective import label_rows, to_original, to_relabelled
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map
from pyg_dist.store._original_ids import PartIds
from pyg_dist.testing import encode_ids
from pyg_dist._typing import HOMO_NODE


@pytest.fixture(scope="module")
def cora3(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora3")
    Partitioner(encode_ids(cora), 3, root, seed=0, progress=False).generate()
    return root


@pytest.fixture(scope="module")
def cora1(cora, tmp_path_factory):
    data = encode_ids(cora)
    root = tmp_path_factory.mktemp("cora1_ids")
    Partitioner(data, 1, root, progress=False).generate()
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    yield data, stores, DistContext(rank=0, world_size=1)
    shutdown_rpc()


def test_translation_matches_the_id_map_both_ways(cora3):
    node_map = read_id_map(cora3)  # relabelled -> original
    meta = io.read_meta(cora3)
    table = PartIds(cora3, meta, 1)
    ctx = DistContext(rank=0, world_size=1)
    original = torch.tensor([0, 5, 2707, 5, 1000])  # any owner, repeats
    got = to_relabelled({HOMO_NODE: original}, table, ctx, "input_nodes")[HOMO_NODE]
    assert torch.equal(node_map[got], original)
    back = to_original({HOMO_NODE: got}, table, ctx)[HOMO_NODE]
    assert torch.equal(back, original)


def test_label_rows_take_dataset_order_or_owned_order(cora3):
    meta = io.read_meta(cora3)
    table = PartIds(cora3, meta, 2)
    node_map = read_id_map(cora3)
    y = torch.arange(meta.num_nodes[HOMO_NODE]) * 10  # label = 10 * original id
    start, stop = (meta.node_offsets[HOMO_NODE][i] for i in (2, 3))
    part = torch.tensor([start, stop - 1, 0])  # two owned nodes, one owned elsewhere
    assert torch.equal(label_rows(y, node_map[part], part, table, HOMO_NODE),
                       node_map[part] * 10)
    local = y[node_map[start:stop]]  # one row per owned node, node_ids.pt order
    got = label_rows(local, node_map[part], part, table, HOMO_NODE)
    assert got[:2].tolist() == (node_map[part[:2]] * 10).tolist() and int(got[2]) == -1


def test_node_split_and_batches_speak_original_ids(cora1):
    data, stores, ctx = cora1
    ids = node_split(stores, "train", ctx)
    assert torch.equal(torch.sort(ids).values, torch.nonzero(data.train_mask).view(-1))
    stores[0].labels = data.y  # PyG's label.pt: dataset order
    loader = DistNeighborLoader(stores, [3, 2], input_nodes=ids, batch_size=40,
                                current_ctx=ctx)
    for batch in loader:
        assert torch.equal(batch.n_id, batch.nid) and torch.equal(batch.e_id, batch.oid)
        assert torch.equal(batch.y, data.y[batch.n_id])
    loader.close()
    stores[0].labels = None


@pytest.mark.parametrize("input_nodes,error,match", [
    (torch.tensor([0, 10 ** 6]), ValueError, "input_nodes holds original id 1000000"),
    (torch.tensor([-1, 3]), ValueError, "input_nodes holds original id -1"),
    (torch.tensor([0.5, 1.0]), TypeError, "input_nodes"),
    (torch.ones(5, dtype=torch.bool), ValueError, "input_nodes mask"),
])
def test_bad_input_nodes_name_the_argument(cora1, input_nodes, error, match):
    _, stores, ctx = cora1
    with pytest.raises(error, match=match):
        DistNeighborLoader(stores, [2], input_nodes=input_nodes, batch_size=4, current_ctx=ctx)


def test_bad_edge_label_index_names_the_argument(cora1):
    _, stores, ctx = cora1
    with pytest.raises(ValueError, match=r"edge_label_index\[1\] \(destinations\)"):
        DistLinkNeighborLoader(stores, [2], edge_label_index=torch.tensor([[0], [10 ** 6]]),
                               batch_size=4, current_ctx=ctx)


def test_labels_of_neither_space_are_refused(cora1):
    data, stores, ctx = cora1
    with pytest.raises(ValueError, match="labels"):
        stores[0].labels = torch.zeros(7)
    stores[0].labels = torch.zeros(data.edge_index.size(1))  # per-edge: stored, unread
    with pytest.raises(ValueError, match=r"labels \(feature.labels\)"):
        DistNeighborLoader(stores, [2], input_nodes=torch.tensor([0, 1]), batch_size=4,
                           current_ctx=ctx)
    stores[0].labels = None
