"""The stores keep PyG's GraphStore/FeatureStore contract, in the dataset's original ids.

Ground truth is the unpartitioned graph: ``get_tensor(index=...)`` takes original ids
and returns the original rows; ``_global_id`` holds the original ids of the owned rows;
PyG's ``csc()``/``coo()``/``get_edge_index`` give original node ids and, as the
permutation, original edge ids; the relabelled view stays under ``csc_by_type`` and
``gather``. Partitions are 2 (so original and relabelled ids differ for nodes too).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_dist import LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.datasets import community_graph, hetero_community_graph
from pyg_dist.format import read_part_ids
from pyg_dist.testing import encode_ids, typed


@pytest.fixture(scope="module")
def homo(tmp_path_factory: pytest.TempPathFactory):
    data = encode_ids(community_graph(500, avg_degree=5, feat_dim=4, num_classes=3, seed=2))
    root = tmp_path_factory.mktemp("ids") / "homo"
    Partitioner(data, 2, root, progress=False).generate()
    return data, root


@pytest.fixture(scope="module")
def hetero(tmp_path_factory: pytest.TempPathFactory):
    data = encode_ids(hetero_community_graph(300, avg_degree=4, feat_dim=4, seed=3))
    root = tmp_path_factory.mktemp("ids") / "hetero"
    Partitioner(data, 2, root, progress=False).generate()
    return data, root


def _groups(data):
    """(PyG group name, node store or edge store, is node) of every type."""
    if isinstance(data, HeteroData):
        return ([(t, data[t], True) for t in data.node_types]
                + [(t, data[t], False) for t in data.edge_types])
    return [(None, data, True), (("_N", "_E", "_N"), data, False)]


@pytest.mark.parametrize("which", ["homo", "hetero"])
@pytest.mark.parametrize("mmap", [True, False])
def test_get_tensor_takes_original_ids(which: str, mmap: bool, request) -> None:
    data, root = request.getfixturevalue(which)
    for part in range(2):
        fs = LocalFeatureStore.from_partition(root, part, mmap=mmap)
        for group, store, is_node in _groups(data):
            resolved = fs.resolve(group, "nid" if is_node else "oid")
            ids = read_part_ids(root, fs.meta, part, "node" if is_node else "edge")[resolved]
            pick = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))]
            attr = "nid" if is_node else "oid"
            assert torch.equal(fs.get_tensor(group, attr, pick), pick)  # nid/oid = original id
            if is_node:
                assert torch.equal(fs.get_tensor(group, "x", pick), store.x[pick])
                [x, nid] = fs.multi_get_tensor([(group, "x", pick[:5]), (group, "nid", pick[:5])])
                assert torch.equal(x, store.x[pick[:5]]) and torch.equal(nid, pick[:5])
                # the internal (relabelled) read of the same rows
                rows = fs.owned_ids(resolved).to_relabelled(pick)
                assert torch.equal(fs.gather(resolved, "x", rows), store.x[pick])


@pytest.mark.parametrize("which", ["homo", "hetero"])
def test_global_id_and_feat_are_original_and_row_aligned(which: str, request) -> None:
    data, root = request.getfixturevalue(which)
    fs = LocalFeatureStore.from_partition(root, 1)
    for group, store, is_node in _groups(data):
        if not is_node:
            continue
        ids = fs._global_id[group]
        assert torch.equal(ids, read_part_ids(root, fs.meta, 1)[fs.resolve(group)])
        assert torch.equal(fs._feat[(group, "x")], store.x[ids])
        assert torch.equal(fs.get_tensor(group, "x"), store.x[ids])  # index=None: all rows


def test_bad_index_names_the_argument(homo) -> None:
    data, root = homo
    fs = LocalFeatureStore.from_partition(root, 0)
    other = read_part_ids(root, fs.meta, 1)["_N"][:3]
    with pytest.raises(ValueError, match=r"index holds original id \d+ of node type '_N' "
                                         r"that partition 0 does not own"):
        fs.get_tensor(None, "x", other)
    with pytest.raises(ValueError, match=r"index holds original id 500 outside \[0, 500\)"):
        fs.get_tensor(None, "x", torch.tensor([0, 500]))
    with pytest.raises(ValueError, match=r"index holds original id -1 outside"):
        fs.get_tensor(None, "x", torch.tensor([-1]))
    with pytest.raises(TypeError, match="index must be an integer tensor.*float32"):
        fs.get_tensor(None, "x", torch.tensor([0.0]))
    with pytest.raises(ValueError, match="does not own"):
        fs.put_tensor(torch.zeros(3, 4), group_name=None, attr_name="x", index=other)


def test_put_tensor_whole_local_and_by_original_ids(homo) -> None:
    data, root = homo
    fs = LocalFeatureStore.from_partition(root, 1)
    ids = fs._global_id[None]
    fs.put_tensor(ids.float().view(-1, 1) * 2, group_name=None, attr_name="twice")  # whole
    pick = ids[[5, 0, 3]]
    assert torch.equal(fs.get_tensor(None, "twice", pick), pick.float().view(-1, 1) * 2)
    fs.put_tensor(torch.full((3, 4), -1.0), group_name=None, attr_name="x", index=pick)
    assert bool((fs.get_tensor(None, "x", pick) == -1).all())
    untouched = ids[[1, 2]]
    assert torch.equal(fs.get_tensor(None, "x", untouched), data.x[untouched])
    clone = pickle.loads(pickle.dumps(fs.share_memory_()))  # a worker translates the same
    assert bool((clone.get_tensor(None, "x", pick) == -1).all())


@pytest.mark.parametrize("which", ["homo", "hetero"])
def test_graph_store_pyg_layouts_are_original(which: str, request) -> None:
    data, root = request.getfixturevalue(which)
    num_nodes, edges = typed(data)
    for part in range(2):
        gs = LocalGraphStore.from_partition(root, part)
        owned = read_part_ids(root, gs.meta, part)
        row, colptr, perm = gs.csc()  # PyG's method (the dict is csc_by_type)
        if not gs.is_hetero:
            row, colptr, perm = {None: row}, {None: colptr}, {None: perm}
        for attr in gs.get_all_edge_attrs():
            et = attr.edge_type if gs.is_hetero else ("_N", "_E", "_N")
            src, dst = edges[et]
            assert attr.size == (num_nodes[et[0]], num_nodes[et[2]])
            e = perm[attr.edge_type]
            mine = torch.isin(dst, owned[et[2]]).nonzero().view(-1)
            assert torch.equal(e.sort().values, mine)  # every in-edge of an owned node
            ptr = colptr[attr.edge_type]
            col = torch.repeat_interleave(torch.arange(num_nodes[et[2]]), ptr.diff())
            assert torch.equal(row[attr.edge_type], src[e]) and torch.equal(col, dst[e])
            s, d = gs.get_edge_index(attr.edge_type, "coo")
            assert torch.equal(s, src[mine]) and torch.equal(d, dst[mine])
            c_row, c_ptr = gs.get_edge_index(attr.edge_type, "csc")
            assert torch.equal(c_row, row[attr.edge_type]) and torch.equal(c_ptr, ptr)
            r_ptr, r_col, r_perm = gs.original_layout(et, "csr")
            assert torch.equal(src[r_perm], torch.repeat_interleave(
                torch.arange(num_nodes[et[0]]), r_ptr.diff())) and torch.equal(dst[r_perm], r_col)


def test_pickled_graph_store_keeps_original_ids(hetero) -> None:
    data, root = hetero
    gs = LocalGraphStore.from_partition(root, 1)
    et = data.edge_types[0]
    before = gs.original_coo(et)
    clone = pickle.loads(pickle.dumps(gs))
    assert all(torch.equal(a, b) for a, b in zip(before, clone.original_coo(et)))


def test_one_partition_csc_is_the_mapped_file(tmp_path: Path) -> None:
    """A one-partition folder's stored CSC already is PyG's CSC in original ids: csc()
    hands out the mapped tensors (no private copy of the graph), equal to ground truth."""
    data = community_graph(300, avg_degree=4, feat_dim=2, num_classes=2, seed=5)
    perm = torch.randperm(data.num_edges, generator=torch.Generator().manual_seed(0))
    data.edge_index = data.edge_index[:, perm]
    Partitioner(data, 1, tmp_path / "one", progress=False).generate()
    gs = LocalGraphStore.from_partition(tmp_path / "one", 0)
    row, colptr, perm = gs.csc()
    stored = gs.csc_by_type[gs.meta.edge_types[0]]
    assert row.data_ptr() == stored.indices.data_ptr()
    assert colptr.data_ptr() == stored.indptr.data_ptr()
    src, dst = data.edge_index
    order = torch.sort(dst, stable=True).indices  # PyG's CSC: by destination, then edge id
    assert torch.equal(perm, order) and torch.equal(row, src[order])
    assert torch.equal(colptr[1:], torch.bincount(dst, minlength=300).cumsum(0))
