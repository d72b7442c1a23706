"""Partition -> load -> map back through node_map/edge_map == the original graph."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.format import _partition_io as io
from pyg_dist.format._integrity import verify_folder
from pyg_dist.format._tables import GraphTables
from pyg_dist._typing import edge_key
from pyg_dist.format import read_id_map


def _maps(root: Path, tables: GraphTables):
    node_map = read_id_map(root)
    edge_map = read_id_map(root, "edge")
    if not tables.is_hetero:
        node_map = {t: node_map for t in tables.num_nodes}
        edge_map = {t: edge_map for t in tables.edge_index}
    else:
        edge_map = {et: edge_map[edge_key(et)] for et in tables.edge_index}
    return node_map, edge_map


def check_roundtrip(tables: GraphTables, root: Path, num_parts: int) -> int:
    """Asserts the partitions hold exactly the original graph and every file its
    recorded digest; returns the cut edges."""
    meta = io.read_meta(root)
    assert meta.num_parts == num_parts
    report = verify_folder(root)
    assert not report.problems and report.files == num_parts * 6, report.problems
    node_map, edge_map = _maps(root, tables)
    for t, n in tables.num_nodes.items():  # node_map is a permutation
        assert torch.equal(torch.sort(node_map[t]).values, torch.arange(n))
    stores = [(LocalGraphStore.from_partition(root, p), LocalFeatureStore.from_partition(root, p))
              for p in range(num_parts)]
    cut = 0
    for et, index in tables.edge_index.items():
        src, dst, eid = [], [], []
        for p, (gs, fs) in enumerate(stores):
            csc = gs.csc_by_type[et]
            s, d = csc.coo()  # relabelled ids
            assert bool(gs.edge_book(et if tables.is_hetero else None).owns(p, csc.edge_ids()).all())
            assert bool(gs.node_book(et[2] if tables.is_hetero else None).owns(p, d).all())
            cut += int((~gs.node_book(et[0] if tables.is_hetero else None).owns(p, s)).sum())
            src.append(s), dst.append(d), eid.append(csc.edge_ids())
            for name, value in tables.edge_attrs[et].items():
                assert torch.equal(fs.gather(et, name, csc.edge_ids()),
                                   value[edge_map[et][csc.edge_ids()]])
        src, dst, eid = torch.cat(src), torch.cat(dst), torch.cat(eid)
        # every edge id appears once and maps to the original edge with the same endpoints
        assert torch.equal(torch.sort(eid).values, torch.arange(index.size(1)))
        orig = index[:, edge_map[et][eid]]
        assert torch.equal(node_map[et[0]][src], orig[0])
        assert torch.equal(node_map[et[2]][dst], orig[1])
    for t, attrs in tables.node_attrs.items():
        group = t if tables.is_hetero else None
        owned = torch.cat([gs.owned_nodes(group) for gs, _ in stores])
        assert torch.equal(owned, torch.arange(tables.num_nodes[t]))  # each owned once
        for name, value in attrs.items():
            got = torch.cat([fs.gather(t, name, gs.owned_nodes(group))
                             for gs, fs in stores])
            assert torch.equal(got, value[node_map[t]]), name
        for split, mask in tables.masks(t).items():
            ids = torch.cat([fs.split_ids(split, group) for _, fs in stores])
            assert torch.equal(torch.sort(node_map[t][ids]).values,
                               torch.nonzero(mask).view(-1))
    return cut


@pytest.mark.parametrize("num_parts", [1, 2, 3, 4])
def test_cora_roundtrip_metis_beats_random(cora, tmp_path: Path, num_parts: int) -> None:
    tables = GraphTables.from_data(cora)
    cuts = {}
    for method in ("metis", "random"):
        root = tmp_path / method
        meta = Partitioner(cora, num_parts, root, method=method, progress=False).generate()
        cuts[method] = check_roundtrip(tables, root, num_parts)
        assert cuts[method] == sum(sum(p.cut_edges.values()) for p in meta.parts)
        train = [p.train_nodes for p in meta.parts]
        assert sum(train) == 140 and max(train) <= 1.05 * 140 / num_parts + 1, train
    if num_parts == 1:
        assert cuts == {"metis": 0, "random": 0}
    else:
        assert cuts["metis"] < 0.25 * cuts["random"], cuts


@pytest.mark.parametrize("num_parts", [2, 3])
@pytest.mark.parametrize("method", ["metis", "random"])
def test_hetero_roundtrip(hetero_graph, tmp_path: Path, num_parts: int, method: str) -> None:
    tables = GraphTables.from_data(hetero_graph)
    assert len(tables.num_nodes) >= 2 and len(tables.edge_index) >= 3
    meta = Partitioner(hetero_graph, num_parts, tmp_path / "out", method=method,
                       progress=False).generate()
    assert meta.is_hetero and set(meta.node_types) == {"paper", "author", "institution"}
    check_roundtrip(tables, tmp_path / "out", num_parts)
    # halo nodes keep their 'time' so temporal sampling can filter them locally
    node_map, _ = _maps(tmp_path / "out", tables)
    for p in range(num_parts):
        gs = LocalGraphStore.from_partition(tmp_path / "out", p)
        halo = gs.halo["paper"]
        assert not bool(gs.node_book("paper").owns(p, halo).any())
        assert torch.equal(gs.halo_attrs["paper"]["time"],
                           hetero_graph["paper"].time[node_map["paper"][halo]])


@pytest.mark.parametrize("num_parts", [2, 3])
def test_coarsened_metis_is_valid_balanced_and_close_to_metis(cora, hetero_graph, tmp_path: Path,
                                                              num_parts: int) -> None:
    for name, graph in (("cora", cora), ("hetero", hetero_graph)):
        tables = GraphTables.from_data(graph)
        cuts, owned = {}, None
        for method, coarsen in (("metis", False), ("metis", True), ("random", False)):
            root = tmp_path / f"{name}_{method}_{coarsen}"
            meta = Partitioner(graph, num_parts, root, method=method, coarsen=coarsen,
                               progress=False).generate()
            cuts[method, coarsen] = check_roundtrip(tables, root, num_parts)
            if coarsen:
                owned = meta.parts
        for node_type, n in tables.num_nodes.items():  # each type within 3% of its share
            counts = [p.owned_nodes[node_type] for p in owned]
            assert max(counts) <= 1.03 * n / num_parts + 1, (name, node_type, counts)
        assert cuts["metis", True] < 0.5 * cuts["random", False], (name, cuts)
        assert cuts["metis", True] < 1.5 * cuts["metis", False], (name, cuts)


def test_coarsen_needs_metis(cora, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="coarsen"):
        Partitioner(cora, 2, tmp_path / "o", method="random", coarsen=True)


def test_deterministic(cora, tmp_path: Path) -> None:
    for i in range(2):
        Partitioner(cora, 3, tmp_path / str(i), seed=7, progress=False).generate()
    for kind in ("node", "edge"):
        assert torch.equal(read_id_map(tmp_path / "0", kind), read_id_map(tmp_path / "1", kind))
    assert (tmp_path / "0" / io.META_FILE).read_text() == (tmp_path / "1" / io.META_FILE).read_text()


def test_memory_is_per_partition(cora, tmp_path: Path) -> None:
    """No store holds a tensor sized by the whole graph's node count."""
    Partitioner(cora, 4, tmp_path, progress=False).generate()
    gs = LocalGraphStore.from_partition(tmp_path, 2)
    fs = LocalFeatureStore.from_partition(tmp_path, 2)
    owned = gs.node_book().size(2)
    assert gs.csc_by_type[gs.meta.edge_types[0]].indptr.numel() == owned + 1
    for attr in fs.get_all_tensor_attrs():
        assert fs.get_tensor(attr).size(0) == owned


def test_coarsens_by_itself_only_when_metis_would_not_fit(cora, tmp_path: Path,
                                                         monkeypatch) -> None:
    from pyg_dist.partition import _assign as assign

    assert assign.should_coarsen(1 << 30, 64 << 30) is False
    assert assign.should_coarsen(1 << 30, 4 << 30) is True
    assert assign.should_coarsen(1 << 30, None) is False
    p = Partitioner(cora, 2, tmp_path / "fits", progress=False)
    p.generate()
    assert "coarsen" not in p.timings.phases_s
    monkeypatch.setattr(assign, "available_memory", lambda: 1024)  # 1 KiB left
    p = Partitioner(cora, 2, tmp_path / "tight", progress=False)
    with pytest.warns(UserWarning, match="label-propagation"):
        p.generate()
    assert "coarsen" in p.timings.phases_s
    p = Partitioner(cora, 2, tmp_path / "forced", progress=False, coarsen=False)
    p.generate()  # an explicit choice is kept
    assert "coarsen" not in p.timings.phases_s
