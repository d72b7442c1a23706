"""PyG's own loaders run over the stores of a one-partition folder, and give the
batches they give over the original ``Data``/``HeteroData`` (ids in original space).

PyG's ``NeighborSampler`` needs pyg-lib, which is not installable here: both sides of
every comparison run on the test-only reference of pyg-lib's ops
(:mod:`tests.support.pyg_lib_reference`), registered by the ``pyg_lib`` fixture,
with the same torch seed. A one-partition folder relabels edges (CSC order), so edge
ids (``e_id``) and the neighbour order PyG samples from are the real test of the
translation; node ids are checked against original ids as well.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, List

import pytest
import torch
from torch_geometric.sampler import hgt_sampler
from torch_geometric.data import HeteroData
from torch_geometric.loader import HGTLoader, LinkNeighborLoader, NeighborLoader

from pyg_dist import LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.datasets._synthetic import community_graph, hetero_community_graph
from tests.support.pyg_lib_reference import reference_ops

NODE_ATTRS = ("x", "y", "nid")


@pytest.fixture(scope="module")
def pyg_lib() -> Iterator[None]:
    """PyG's samplers on pyg-lib's ops (the reference's, unless pyg-lib is installed)."""
    with reference_ops():
        yield


def _homo():
    data = community_graph(400, avg_degree=5, feat_dim=4, num_classes=3, seed=7)
    data.nid = torch.arange(data.num_nodes)
    perm = torch.randperm(data.num_edges, generator=torch.Generator().manual_seed(1))
    data.edge_index = data.edge_index[:, perm]  # original edge order unlike CSC order
    return data


def _hetero():
    data = hetero_community_graph(200, avg_degree=4, feat_dim=4, seed=8)
    out = HeteroData()
    for t in data.node_types:
        out[t].x = data[t].x
        out[t].nid = torch.arange(data[t].num_nodes)
    out["paper"].y = data["paper"].y
    for et in data.edge_types:  # edge attributes: PyG's remote backends do not read them
        out[et].edge_index = data[et].edge_index
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory):
    out = {}
    for name, data in (("homo", _homo()), ("hetero", _hetero())):
        root = tmp_path_factory.mktemp("pyg") / name
        Partitioner(data, 1, root, progress=False).generate()
        out[name] = (data, root)
    return out


def _stores(root: Path, mmap: bool):
    return (LocalFeatureStore.from_partition(root, 0, mmap=mmap),
            LocalGraphStore.from_partition(root, 0, mmap=mmap))


def _run(make, seed: int = 0) -> List:
    torch.manual_seed(seed)
    return list(make())


def _same_homo(a, b) -> None:
    for key in ("n_id", "e_id", "edge_index", "input_id", "batch_size",
                "num_sampled_nodes", "num_sampled_edges", *NODE_ATTRS):
        assert (key in a) == (key in b), key
        if key in a:
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key
    assert "e_id" in b and torch.equal(b.nid, b.n_id)  # rows of the original ids in n_id


def _same_hetero(a, b) -> None:
    for t in a.node_types:
        for key in ("n_id", "num_sampled_nodes", *NODE_ATTRS):
            if key in a[t]:
                assert torch.equal(torch.as_tensor(a[t][key]), torch.as_tensor(b[t][key])), \
                    (t, key)
        assert torch.equal(b[t].nid, b[t].n_id)
    for et in a.edge_types:
        for key in ("edge_index", "e_id", "num_sampled_edges"):
            assert torch.equal(torch.as_tensor(a[et][key]), torch.as_tensor(b[et][key])), \
                (et, key)


@pytest.mark.parametrize("mmap", [True, False])
def test_neighbor_loader_homo(pyg_lib, folders, mmap: bool) -> None:
    data, root = folders["homo"]
    stores = _stores(root, mmap)
    seeds = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(2))[:60]
    kwargs = dict(num_neighbors=[4, 3], input_nodes=seeds, batch_size=16, shuffle=True)
    want = _run(lambda: NeighborLoader(data, **kwargs))
    got = _run(lambda: NeighborLoader(stores, **kwargs))
    assert len(want) == len(got) == 4
    for a, b in zip(want, got):
        _same_homo(a, b)
        assert torch.equal(a.e_id.sort().values, a.e_id.unique())  # really edge ids
    assert any(not torch.equal(b.e_id, torch.arange(b.e_id.numel())) for b in got)


@pytest.mark.parametrize("mmap", [True, False])
def test_link_neighbor_loader_homo(pyg_lib, folders, mmap: bool) -> None:
    data, root = folders["homo"]
    stores = _stores(root, mmap)
    pick = torch.randperm(data.num_edges, generator=torch.Generator().manual_seed(3))[:40]
    kwargs = dict(num_neighbors=[3, 2], edge_label_index=data.edge_index[:, pick],
                  edge_label=torch.ones(40), batch_size=8, neg_sampling_ratio=1.0,
                  shuffle=True)
    want = _run(lambda: LinkNeighborLoader(data, **kwargs))
    # PyG takes a remote backend's edges as (edge type, index), None for homogeneous
    kwargs["edge_label_index"] = (None, kwargs["edge_label_index"])
    got = _run(lambda: LinkNeighborLoader(stores, **kwargs))
    assert len(want) == len(got) == 5
    for a, b in zip(want, got):
        _same_homo(a, b)
        for key in ("edge_label_index", "edge_label"):
            assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("mmap", [True, False])
def test_neighbor_loader_hetero(pyg_lib, folders, mmap: bool) -> None:
    data, root = folders["hetero"]
    stores = _stores(root, mmap)
    seeds = torch.randperm(data["paper"].num_nodes, generator=torch.Generator().manual_seed(4))
    kwargs = dict(num_neighbors=[3, 2], input_nodes=("paper", seeds[:48]), batch_size=16)
    want = _run(lambda: NeighborLoader(data, **kwargs))
    got = _run(lambda: NeighborLoader(stores, **kwargs))
    assert len(want) == len(got) == 3
    for a, b in zip(want, got):
        _same_hetero(a, b)
        assert a["paper"].batch_size == b["paper"].batch_size == 16


def test_link_neighbor_loader_hetero(pyg_lib, folders) -> None:
    data, root = folders["hetero"]
    stores = _stores(root, True)
    et = ("author", "writes", "paper")
    kwargs = dict(num_neighbors=[2, 2], edge_label_index=(et, data[et].edge_index[:, :30]),
                  batch_size=10)
    want = _run(lambda: LinkNeighborLoader(data, **kwargs))
    got = _run(lambda: LinkNeighborLoader(stores, **kwargs))
    assert len(want) == len(got) == 3
    for a, b in zip(want, got):
        _same_hetero(a, b)
        assert torch.equal(a[et].edge_label_index, b[et].edge_label_index)


def test_hgt_loader_does_not_apply_to_stores(folders) -> None:
    """PyG's ``HGTSampler`` needs torch-sparse's ``hgt_sample`` (no pyg-lib op exists for
    it) and, past that check, refuses any ``(FeatureStore, GraphStore)`` pair: HGTLoader
    does not apply to remote backends, ours or any other."""
    _, root = folders["hetero"]
    stores = _stores(root, True)
    with pytest.raises(ImportError, match="torch-sparse"):
        HGTLoader(stores, num_samples=[4], input_nodes=("paper", None))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hgt_sampler, "WITH_TORCH_SPARSE", True)
        with pytest.raises(NotImplementedError, match="does not support a data object"):
            HGTLoader(stores, num_samples=[4], input_nodes=("paper", None))
