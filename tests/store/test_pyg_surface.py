"""``torch_geometric.distributed``'s public store surface: stores built in memory
(``LocalFeatureStore()``, ``from_data``, ``from_hetero_data``), the global-id and
partition-book accessors, PyG's group names for homogeneous graphs, and the COO layout
``get_all_edge_attrs`` reports. Global ids are the dataset's original ids; ground truth
is the unpartitioned graph (2 partitions, so original and relabelled ids differ)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import EdgeAttr

from pyg_dist import LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.datasets import community_graph, hetero_community_graph
from pyg_dist.format import read_part_ids
from pyg_dist.testing import encode_ids, typed


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory):
    data = encode_ids(community_graph(120, avg_degree=4, feat_dim=3, num_classes=2, seed=4))
    data.time = torch.arange(data.num_nodes) % 7
    data.edge_attr = torch.randn(data.num_edges, 2)
    data.edge_time = torch.arange(data.num_edges) % 5
    root = tmp_path_factory.mktemp("surface") / "homo"
    Partitioner(data, 2, root, progress=False).generate()
    return data, root


@pytest.fixture(scope="module")
def hetero(tmp_path_factory: pytest.TempPathFactory):
    data = encode_ids(hetero_community_graph(150, avg_degree=3, feat_dim=2, seed=6))
    root = tmp_path_factory.mktemp("surface") / "hetero"
    Partitioner(data, 2, root, progress=False).generate()
    return data, root


# ---- stores built in memory --------------------------------------------------------
def test_empty_feature_store_takes_global_ids() -> None:
    store = LocalFeatureStore()
    feat = torch.arange(9.0).view(-1, 1).repeat(1, 3)
    paper = torch.tensor([1, 2, 3, 5, 8, 4])
    store.put_global_id(paper, group_name="paper")
    store.put_tensor(feat[paper], group_name="paper", attr_name="feat")
    out = store.get_tensor_from_global_id(group_name="paper", attr_name="feat",
                                          index=torch.tensor([3, 8, 4]))
    assert torch.equal(out, feat[[3, 8, 4]])
    assert torch.equal(store.get_tensor("paper", "feat", index=torch.tensor([8])), feat[[8]])
    [attr] = store.get_all_tensor_attrs()
    assert (attr.group_name, attr.attr_name, attr.index) == ("paper", "feat", None)
    assert store.get_tensor_size(attr) == (6, 3)
    with pytest.raises(ValueError, match="original id 6 .* does not own"):
        store.get_tensor("paper", "feat", index=torch.tensor([6]))
    with pytest.raises(ValueError, match="needs index="):
        store.get_tensor_from_global_id(group_name="paper", attr_name="feat")
    with pytest.raises(ValueError, match="has 6 rows"):
        store.put_global_id(torch.arange(4), group_name="paper")
    with pytest.raises(ValueError, match="an id twice"):
        store.put_global_id(torch.tensor([1, 1, 2, 3, 4, 5]), group_name="paper")
    assert store.remove_global_id("paper") and store.get_global_id("paper") is None
    assert (store.num_partitions, store.partition_idx, store.meta) == (1, 0, None)


def test_feature_store_from_data_is_pygs() -> None:
    node_id, x, y = torch.randperm(6), torch.randn(6, 4), torch.randint(0, 2, (6,))
    edge_id, edge_attr = torch.randperm(12), torch.randn(12, 3)
    store = LocalFeatureStore.from_data(node_id, x, y, edge_id, edge_attr)
    attrs = [(a.group_name, a.attr_name) for a in store.get_all_tensor_attrs()]
    assert attrs == [(None, "x"), (None, "y"), ((None, None), "edge_attr")]
    assert torch.equal(store.get_global_id(None), node_id)
    assert torch.equal(store.get_global_id((None, None)), edge_id)
    assert torch.equal(store.get_tensor(group_name=None, attr_name="x"), x)
    assert torch.equal(store.get_tensor((None, None), "edge_attr"), edge_attr)
    assert torch.equal(store.get_tensor(None, "edge_attr"), edge_attr)  # None finds edges too
    pick = node_id[[4, 1]]  # index takes global ids: the rows they were given for
    assert torch.equal(store.get_tensor(None, "x", index=pick), x[[4, 1]])
    with pytest.raises(ValueError, match="needs its edge_id"):
        LocalFeatureStore.from_data(node_id, x, edge_attr=edge_attr)

    et = ("paper", "to", "paper")
    hetero = LocalFeatureStore.from_hetero_data({"paper": node_id}, {"paper": x}, {"paper": y},
                                                {et: edge_id}, {et: edge_attr})
    attrs = [(a.group_name, a.attr_name) for a in hetero.get_all_tensor_attrs()]
    assert attrs == [("paper", "x"), ("paper", "y"), (et, "edge_attr")]
    assert torch.equal(hetero.get_global_id(et), edge_id)
    assert torch.equal(hetero.get_tensor(et, "edge_attr"), edge_attr)


def test_empty_graph_store_keeps_edges_and_ids() -> None:
    store = LocalGraphStore()
    edge_index = torch.randint(0, 10, (2, 30))
    edge_id = torch.randperm(30)
    store.put_edge_index(edge_index, edge_type=None, layout="coo", size=(10, 10))
    store.put_edge_id(edge_id, edge_type=None, layout="coo", size=(10, 10))
    [attr] = store.get_all_edge_attrs()
    assert torch.equal(store.get_edge_index(attr), edge_index)
    assert torch.equal(store.get_edge_id(attr), edge_id)
    assert torch.equal(store.get_edge_id(edge_type=(None, None), layout="coo"), edge_id)
    assert not store.is_sorted
    assert store.remove_edge_index(attr) and store.remove_edge_id(attr)
    assert store.get_all_edge_attrs() == [] and store.get_edge_id(attr) is None


def test_graph_store_from_data_sorts_by_destination() -> None:
    edge_index = torch.tensor([[1, 5, 7, 1, 6], [0, 1, 0, 2, 1]])
    edge_id = torch.tensor([0, 2, 1, 4, 3])
    expected = torch.tensor([[1, 7, 5, 6, 1], [0, 0, 1, 1, 2]])
    store = LocalGraphStore.from_data(edge_id, edge_index, num_nodes=8)
    [attr] = store.get_all_edge_attrs()
    assert (attr.edge_type, attr.layout.value, attr.is_sorted, attr.size) == \
        (None, "coo", True, (8, 8))
    assert torch.equal(store.get_edge_index(None, "coo"), expected)
    assert torch.equal(store.get_edge_id(None, "coo"), torch.arange(5))
    assert store.meta == {"is_hetero": False} and not store.is_hetero
    row, colptr, _ = store.csc()
    assert torch.equal(row, expected[0]) and torch.equal(colptr, torch.tensor(
        [0, 2, 4, 5, 5, 5, 5, 5, 5]))
    store.partition_idx, store.num_partitions = 1, 2  # settable in memory, as in PyG
    assert (store.partition_idx, store.num_partitions) == (1, 2)

    et = ("paper", "to", "paper")
    hetero = LocalGraphStore.from_hetero_data({et: edge_id}, {et: edge_index}, {"paper": 8})
    assert hetero.is_hetero and hetero.get_all_edge_attrs()[0].edge_type == et
    assert torch.equal(hetero.get_edge_index(et, "coo"), expected)
    with pytest.raises(ValueError, match=r"\[2, num_edges\]"):
        LocalGraphStore.from_data(None, torch.zeros(3, 4, dtype=torch.long), num_nodes=4)


# ---- stores of a partition: PyG's names, original ids ------------------------------
def _owner(root, meta, kind: str):
    """Ground truth owner of every original id, by type, from the id files."""
    out = {}
    for part in range(meta.num_parts):
        for group, ids in read_part_ids(root, meta, part, kind).items():
            total = (meta.num_nodes if kind == "node" else meta.num_edges)[group]
            out.setdefault(group, torch.full((total,), -1))[ids] = part
    return out


@pytest.mark.parametrize("which", ["temporal", "hetero"])
def test_partition_global_ids_and_books(which: str, request) -> None:
    data, root = request.getfixturevalue(which)
    for part in range(2):
        fs = LocalFeatureStore.from_partition(root, part)
        gs = LocalGraphStore.from_partition(root, part)
        meta = fs.meta
        assert (fs.num_partitions, fs.partition_idx, gs.num_partitions, gs.partition_idx) == \
            (2, part, 2, part)
        for kind, books in (("node", (fs.node_feat_pb, gs.node_pb)),
                            ("edge", (fs.edge_feat_pb, gs.edge_pb))):
            for group, owner in _owner(root, meta, kind).items():
                pick = torch.randperm(owner.numel(), generator=torch.Generator().manual_seed(1))
                for book in books:
                    book = book[group] if meta.is_hetero else book
                    assert torch.equal(book[pick], owner[pick]) and len(book) == owner.numel()
        node_types, edge_types = meta.node_types, meta.edge_types
        for group in node_types + edge_types:
            kind = "edge" if isinstance(group, tuple) else "node"
            pyg = group if meta.is_hetero else (None if kind == "node" else (None, None))
            ids = fs.get_global_id(pyg)
            assert torch.equal(ids, read_part_ids(root, meta, part, kind)[group].long())
            attr = "oid" if kind == "edge" else "nid"
            assert torch.equal(fs.get_tensor(pyg, attr), ids)  # rows aligned with the ids
            assert torch.equal(fs.get_tensor_from_global_id(pyg, attr, index=ids[:5]), ids[:5])
        assert fs.put_global_id(fs.get_global_id(pyg), group_name=pyg)  # the same: accepted
        with pytest.raises(ValueError, match="cannot be changed"):
            fs.put_global_id(fs.get_global_id(pyg).flip(0), group_name=pyg)
        with pytest.raises(AttributeError, match="comes from the folder"):
            gs.partition_idx = 0
        with pytest.raises(AttributeError, match="comes from the folder"):
            fs.node_feat_pb = None


def test_partition_attrs_in_pygs_order_and_homo_aliases(temporal) -> None:
    data, root = temporal
    fs = LocalFeatureStore.from_partition(root, 1)
    attrs = [(a.group_name, a.attr_name) for a in fs.get_all_tensor_attrs()]
    assert attrs[:4] == [(None, "x"), (None, "time"), ((None, None), "edge_attr"),
                         ((None, None), "edge_time")]  # PyG's partitioner's, in its order
    assert {a for _, a in attrs[4:]} == {"y", "nid", "oid", "train_mask", "val_mask",
                                         "test_mask"}
    ids = fs.get_global_id((None, None))
    for group in ((None, None), ("_N", "_E", "_N")):
        assert torch.equal(fs.get_tensor(group, "edge_time"), data.edge_time[ids])
        assert torch.equal(fs.get_tensor(group, "edge_attr", index=ids[:3]),
                           data.edge_attr[ids[:3]])
    rows = torch.tensor([0, 2])
    with pytest.raises(ValueError, match=r"index=get_global_id\(group\)\[r\]"):
        fs.get_tensor(None, "x", index=torch.arange(fs.get_global_id(None).numel()))
    assert torch.equal(fs.get_tensor(None, "x", index=fs.get_global_id(None)[rows]),
                       fs.get_tensor(None, "x")[rows])  # the one-line replacement


@pytest.mark.parametrize("which", ["temporal", "hetero"])
def test_edge_attrs_report_the_layout_get_edge_index_gives(which: str, request) -> None:
    data, root = request.getfixturevalue(which)
    _, edges = typed(data)
    gs = LocalGraphStore.from_partition(root, 0)
    for attr in gs.get_all_edge_attrs():
        assert attr.layout.value == "coo" and not attr.is_sorted
        et = attr.edge_type if gs.is_hetero else ("_N", "_E", "_N")
        row, col = gs.get_edge_index(attr)  # (src, dst), never (row, colptr)
        eid = gs.get_edge_id(attr)
        src, dst = edges[et]
        assert row.numel() == col.numel() == eid.numel()
        assert torch.equal(row, src[eid]) and torch.equal(col, dst[eid])
        c_row, colptr = gs.get_edge_index(attr.edge_type, "csc")
        c_eid = gs.get_edge_id(attr.edge_type, "csc")
        assert torch.equal(c_row, src[c_eid]) and colptr.numel() == attr.size[1] + 1
    if not gs.is_hetero:
        assert torch.equal(gs.get_edge_index((None, None), "coo")[0], row)
    with pytest.raises(ValueError, match="part of the partition"):
        gs.put_edge_id(torch.arange(3), gs.get_all_edge_attrs()[0])
    extra = EdgeAttr(("a", "to", "b") if gs.is_hetero else None, "coo", size=(3, 3))
    if gs.is_hetero:  # edges put beside the partition's keep their ids
        gs.put_edge_index(torch.tensor([[0, 1], [1, 2]]), extra)
        gs.put_edge_id(torch.tensor([7, 9]), extra)
        assert torch.equal(gs.get_edge_id(extra), torch.tensor([7, 9]))
        assert gs.get_all_edge_attrs()[-1].edge_type == ("a", "to", "b")
        assert gs.remove_edge_id(extra) and gs.remove_edge_index(extra)


def test_coo_edge_index_is_one_tensor_as_pygs(temporal) -> None:
    """PyG's scripts size their link labels by ``get_edge_index(None, 'coo').size(1)``."""
    data, root = temporal
    gs = LocalGraphStore.from_partition(root, 1)
    edge_index = gs.get_edge_index(None, "coo")
    eid = gs.get_edge_id(None, "coo")
    assert edge_index.shape == (2, eid.numel())
    assert torch.equal(edge_index, data.edge_index[:, eid])


@pytest.mark.parametrize("which", ["temporal", "hetero"])
def test_edge_index_dict_reads_as_pygs(which: str, request) -> None:
    """PyG's scripts and tests read ``graph_store._edge_index[(edge_type, 'coo')]``:
    the partition's edges in original ids, read-only."""
    data, root = request.getfixturevalue(which)
    _, edges = typed(data)
    gs = LocalGraphStore.from_partition(root, 1)
    keys = list(gs._edge_index)
    assert len(keys) == len(gs._edge_index) == len(gs.get_all_edge_attrs()) > 0
    for edge_type, layout in keys:
        assert layout == "coo"
        row, col = gs._edge_index[(edge_type, layout)]
        eid = gs.get_edge_id(edge_type, "coo")
        src, dst = edges[edge_type if gs.is_hetero else ("_N", "_E", "_N")]
        assert torch.equal(row, src[eid]) and torch.equal(col, dst[eid])
    with pytest.raises(KeyError):
        gs._edge_index[(("no", "such", "type"), "coo")]
    with pytest.raises(KeyError, match="edge_type, layout"):
        gs._edge_index["coo"]
    with pytest.raises(TypeError):
        gs._edge_index[keys[0]] = torch.zeros(2, 1)


def test_node_time_answers_for_every_node_as_pygs_partitions(temporal) -> None:
    """PyG's partitions hold every node's ``time``: ``get_tensor`` without ``index`` gives
    all of them in original id order, and ``index`` takes any node; other attributes keep
    the owned rows."""
    data, root = temporal
    for pid in (0, 1):
        fs = LocalFeatureStore.from_partition(root, pid)
        owned = fs.get_global_id(None)
        assert torch.equal(fs.get_tensor(None, "time"), data.time)
        assert fs.get_tensor_size(None, "time") == (data.num_nodes,)
        other = torch.tensor([i for i in range(data.num_nodes) if i not in set(owned.tolist())])
        assert torch.equal(fs.get_tensor(None, "time", index=other[:5]), data.time[other[:5]])
        assert torch.equal(fs.get_tensor(None, "time", index=owned[:3]), data.time[owned[:3]])
        assert fs.get_tensor(None, "x").size(0) == owned.numel()  # still the owned rows
        with pytest.raises(ValueError, match="does not own"):
            fs.get_tensor(None, "x", index=other[:1])
        new = torch.full((owned.numel(),), 99)
        fs.put_tensor(new, group_name=None, attr_name="time")  # the owned rows, as ever
        whole = fs.get_tensor(None, "time")
        assert torch.equal(whole[owned], new) and torch.equal(whole[other], data.time[other])


def test_node_time_for_every_node_in_hetero_partitions(tmp_path) -> None:
    data = encode_ids(hetero_community_graph(80, avg_degree=3, feat_dim=2, seed=2))
    for node_type in data.node_types:
        data[node_type].time = torch.arange(data[node_type].num_nodes) % 9
    Partitioner(data, 3, tmp_path, progress=False).generate()
    for pid in range(3):
        fs = LocalFeatureStore.from_partition(tmp_path, pid)
        for node_type in data.node_types:
            assert torch.equal(fs.get_tensor(node_type, "time"), data[node_type].time)
