"""method="kaminpar": valid, balanced partitions with a cut close to METIS's; a clear
one-line error where the optional kaminpar package is missing."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dist import Partitioner
from pyg_dist.cli.partition import main
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map
from pyg_dist.partition._graph_kernels import EdgeBlock, symmetric_csr
from pyg_dist.format._tables import GraphTables
from test_roundtrip import check_roundtrip

HAVE_KAMINPAR = importlib.util.find_spec("kaminpar") is not None
needs_kaminpar = pytest.mark.skipif(not HAVE_KAMINPAR, reason="the optional kaminpar package "
                                    "is not installed (pip install 'pyg_dist[kaminpar]')")


@pytest.fixture(scope="module")
def community():
    from pyg_dist.datasets import community_graph

    return community_graph(4000, avg_degree=12, feat_dim=4, num_classes=4, seed=3)


def _cut_and_meta(graph, num_parts: int, method: str, root: Path):
    meta = Partitioner(graph, num_parts, root, method=method, progress=False).generate()
    return check_roundtrip(GraphTables.from_data(graph), root, num_parts), meta


@needs_kaminpar
def test_parhip_file_is_the_graph_kaminpar_reads(tmp_path: Path) -> None:
    import kaminpar

    from pyg_dist.partition._kaminpar_assign import read_parhip_neighbours, write_parhip

    src = np.array([0, 1, 2, 3, 4, 0, 2])
    dst = np.array([1, 2, 0, 4, 5, 5, 4])
    xadj, adjncy = symmetric_csr([EdgeBlock(src, dst, 0, 0)], 7)  # node 6 isolated
    write_parhip(tmp_path / "g.parhip", xadj, adjncy)
    back = read_parhip_neighbours(tmp_path / "g.parhip")
    assert back.dtype == np.uint32 and np.array_equal(back, adjncy)
    graph = kaminpar.load_graph(str(tmp_path / "g.parhip"), kaminpar.GraphFileFormat.PARHIP)
    assert (graph.n(), graph.m()) == (7, adjncy.size)
    assert not graph.is_node_weighted() and not graph.is_edge_weighted()
    for u in range(7):
        assert sorted(v for v, _ in graph.neighbors(u)) == \
            adjncy[xadj[u]:xadj[u + 1]].tolist()


@needs_kaminpar
@pytest.mark.parametrize("num_parts", [2, 4])
def test_cora_and_community_valid_balanced_cut_close_to_metis(
        cora, community, tmp_path: Path, num_parts: int) -> None:
    for name, graph in (("cora", cora), ("community", community)):
        cut, meta = _cut_and_meta(graph, num_parts, "kaminpar", tmp_path / f"{name}_k")
        metis_cut, _ = _cut_and_meta(graph, num_parts, "metis", tmp_path / f"{name}_m")
        assert meta.method == "kaminpar"
        assert cut <= 1.3 * metis_cut, (name, cut, metis_cut)
        owned = [sum(p.owned_nodes.values()) for p in meta.parts]
        assert max(owned) <= 1.03 * graph.num_nodes / num_parts + 1, (name, owned)
        train = [p.train_nodes for p in meta.parts]
        total = int(graph.train_mask.sum())
        assert sum(train) == total and max(train) <= 1.05 * total / num_parts + 1, train


@needs_kaminpar
def test_hetero_each_node_type_balanced(hetero_graph, tmp_path: Path) -> None:
    tables = GraphTables.from_data(hetero_graph)
    meta = Partitioner(hetero_graph, 3, tmp_path, method="kaminpar", progress=False).generate()
    check_roundtrip(tables, tmp_path, 3)
    for node_type, n in tables.num_nodes.items():
        counts = [p.owned_nodes[node_type] for p in meta.parts]
        assert max(counts) <= 1.03 * n / 3 + 1, (node_type, counts)


@needs_kaminpar
def test_deterministic_for_a_seed(cora, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for i in range(2):
        Partitioner(cora, 3, tmp_path / str(i), method="kaminpar", seed=5,
                    progress=False).generate()
    assert torch.equal(read_id_map(tmp_path / "0"), read_id_map(tmp_path / "1"))


@needs_kaminpar
def test_cli_method_kaminpar(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    assert main(["--dataset", "synthetic", "--num-nodes", "500", "--avg-degree", "6",
                 "--feat-dim", "2", "--num-classes", "2", "--num-parts", "2", "--quiet",
                 "--method", "kaminpar", "--out", str(out)]) == 0
    assert io.read_meta(out).method == "kaminpar"
    assert "with kaminpar" in capsys.readouterr().out


def test_missing_kaminpar_is_a_clear_error(cora, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "kaminpar", None)  # import kaminpar -> ImportError
    with pytest.raises(ImportError, match=r"pip install .*kaminpar"):
        Partitioner(cora, 2, tmp_path / "p", method="kaminpar", progress=False)
    assert not (tmp_path / "p").exists()
    out = tmp_path / "o"
    code = main(["--dataset", "synthetic", "--num-nodes", "60", "--num-parts", "2", "--quiet",
                 "--method", "kaminpar", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pip install" in err, err
    assert "Traceback" not in err and not out.exists()


def test_kaminpar_takes_no_metis_options(cora, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="coarsen"):
        Partitioner(cora, 2, tmp_path, method="kaminpar", coarsen=True)
    with pytest.raises(ValueError, match="recursive"):
        Partitioner(cora, 2, tmp_path, method="kaminpar", recursive=True)
