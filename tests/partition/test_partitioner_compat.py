"""torch_geometric.distributed compatibility of :class:`Partitioner`: ``recursive``
(also as the 4th positional argument), ``generate_partition()`` and ``method="given"``."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import pymetis
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore, Partitioner
from pyg_dist.datasets import community_graph, hetero_community_graph
from pyg_dist.format import _partition_io as io
from pyg_dist.format import read_id_map


@pytest.fixture(scope="module")
def graph():
    return community_graph(1200, avg_degree=8, feat_dim=4, num_classes=3, seed=4)


@pytest.fixture(scope="module")
def hetero():
    return hetero_community_graph(400, avg_degree=4, feat_dim=4, seed=4)


@pytest.fixture
def metis_calls(monkeypatch: pytest.MonkeyPatch) -> list:
    """Records the keyword arguments of every ``pymetis.part_graph`` call."""
    calls, real = [], pymetis.part_graph

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", spy)
    return calls


def _owner_of_original(root: Path, meta) -> Dict[str, np.ndarray]:
    """Per node type, the partition that owns each original node id."""
    node_map = read_id_map(root)
    if not meta.is_hetero:
        node_map = {meta.node_types[0]: node_map}
    owner = {}
    for t, new_to_old in node_map.items():
        offsets = np.asarray(meta.node_offsets[t])
        parts = np.searchsorted(offsets, np.arange(new_to_old.numel()), side="right") - 1
        owner[t] = np.empty(new_to_old.numel(), dtype=np.int64)
        owner[t][new_to_old.numpy()] = parts
    return owner


def test_recursive_metis_is_valid_balanced_and_recorded(graph, tmp_path: Path,
                                                        metis_calls: list) -> None:
    meta = Partitioner(graph, 4, tmp_path / "r", recursive=True, progress=False).generate()
    assert metis_calls and all(c.get("recursive") is True for c in metis_calls)
    assert meta.method == "metis-recursive" and io.read_meta(tmp_path / "r").method == meta.method
    owned = [p.owned_nodes["_N"] for p in meta.parts]
    assert sum(owned) == 1200 and max(owned) <= 1.03 * 1200 / 4 + 1, owned
    node_map = read_id_map(tmp_path / "r")
    assert torch.equal(torch.sort(node_map).values, torch.arange(1200))
    for p in range(4):  # every partition loads
        LocalGraphStore.from_partition(tmp_path / "r", p)
        LocalFeatureStore.from_partition(tmp_path / "r", p)


def test_recursive_with_coarsening_reaches_metis(graph, tmp_path: Path,
                                                 metis_calls: list) -> None:
    meta = Partitioner(graph, 3, tmp_path / "c", recursive=True, coarsen=True,
                       progress=False).generate()
    assert metis_calls and all(c.get("recursive") is True for c in metis_calls)
    assert meta.method == "metis-recursive"


def test_default_keeps_pymetis_choice_method_and_uid(graph, tmp_path: Path,
                                                     metis_calls: list) -> None:
    """No ``recursive``: pymetis's own choice, META method "metis", uid as before."""
    plain = Partitioner(graph, 2, tmp_path / "a", progress=False).generate()
    assert metis_calls and all(c.get("recursive") is None for c in metis_calls)
    again = Partitioner(graph, 2, tmp_path / "b", recursive=None, progress=False).generate()
    assert plain.method == again.method == "metis" and plain.uid == again.uid


def test_recursive_false_is_kway(graph, tmp_path: Path, metis_calls: list) -> None:
    meta = Partitioner(graph, 2, tmp_path / "k", recursive=False, progress=False).generate()
    assert metis_calls and all(c.get("recursive") is False for c in metis_calls)
    assert meta.method == "metis-kway"


def test_positional_bool_is_recursive_as_in_pyg(graph, tmp_path: Path) -> None:
    """PyG scripts call ``Partitioner(data, num_parts, root, recursive)`` positionally."""
    rec = Partitioner(graph, 2, tmp_path / "t", True, progress=False)
    assert rec.recursive is True and rec.method == "metis"
    kway = Partitioner(graph, 2, tmp_path / "f", False, progress=False)
    assert kway.recursive is False and kway.method == "metis"
    assert rec.generate().method == "metis-recursive"
    assert kway.generate_partition().method == "metis-kway"
    with pytest.raises(ValueError, match="recursive given twice"):
        Partitioner(graph, 2, tmp_path / "x", True, recursive=False)


def test_recursive_needs_metis(graph, tmp_path: Path) -> None:
    for method in ("random", "given"):
        with pytest.raises(ValueError, match="recursive"):
            Partitioner(graph, 2, tmp_path / "o", method=method, recursive=True,
                        assignment=torch.zeros(1200, dtype=torch.long))


def test_generate_partition_is_generate(graph, tmp_path: Path) -> None:
    first = Partitioner(graph, 2, tmp_path / "a", progress=False).generate_partition()
    second = Partitioner(graph, 2, tmp_path / "b", progress=False).generate()
    assert first.uid == second.uid and first == io.read_meta(tmp_path / "a")


def test_given_assignment_is_kept_exactly(graph, tmp_path: Path) -> None:
    given = torch.from_numpy(np.random.default_rng(0).integers(0, 3, 1200))
    meta = Partitioner(graph, 3, tmp_path / "g", method="given", assignment=given,
                       progress=False).generate()
    assert meta.method == "given"
    assert np.array_equal(_owner_of_original(tmp_path / "g", meta)["_N"], given.numpy())
    assert [p.owned_nodes["_N"] for p in meta.parts] == torch.bincount(given).tolist()


def test_given_hetero_assignment_is_kept_exactly(hetero, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    given = {t: torch.from_numpy(rng.integers(0, 2, hetero[t].num_nodes))
             for t in hetero.node_types}
    meta = Partitioner(hetero, 2, tmp_path / "h", method="given", assignment=given,
                       progress=False).generate()
    owner = _owner_of_original(tmp_path / "h", meta)
    for t in hetero.node_types:
        assert np.array_equal(owner[t], given[t].numpy()), t
    for p in range(2):
        LocalGraphStore.from_partition(tmp_path / "h", p)


def test_given_single_partition(graph, tmp_path: Path) -> None:
    meta = Partitioner(graph, 1, tmp_path / "one", method="given",
                       assignment=torch.zeros(1200, dtype=torch.int32),
                       progress=False).generate()
    assert meta.num_parts == 1 and meta.method == "given"


@pytest.mark.parametrize("assignment, message", [
    (None, "assignment"),
    (torch.zeros(5, dtype=torch.long), "1200 nodes"),
    (torch.full((1200,), 3), r"\[0, 3\)"),
    (torch.full((1200,), -1), r"\[0, 3\)"),
    (torch.zeros(1200, dtype=torch.float32), "integer"),
    (torch.zeros((1200, 1), dtype=torch.long), "1-d"),
    (torch.arange(1200) % 2, "partition 2 .*empty"),
    ({"_N": torch.zeros(1200)}, "tensor"),
])
def test_given_assignment_is_validated(graph, tmp_path: Path, assignment, message) -> None:
    with pytest.raises(ValueError, match=message):
        Partitioner(graph, 3, tmp_path / "o", method="given", assignment=assignment)


def test_given_hetero_assignment_is_validated(hetero, tmp_path: Path) -> None:
    full = {t: torch.zeros(hetero[t].num_nodes, dtype=torch.long) for t in hetero.node_types}
    full["paper"][0] = 1
    missing = {t: v for t, v in full.items() if t != "author"}
    with pytest.raises(ValueError, match="'author'"):
        Partitioner(hetero, 2, tmp_path / "o", method="given", assignment=missing)
    with pytest.raises(ValueError, match="dict"):
        Partitioner(hetero, 2, tmp_path / "o", method="given", assignment=full["paper"])
    extra = {**full, "venue": torch.zeros(3, dtype=torch.long)}
    with pytest.raises(ValueError, match="'venue'"):
        Partitioner(hetero, 2, tmp_path / "o", method="given", assignment=extra)
    Partitioner(hetero, 2, tmp_path / "o", method="given", assignment=full)  # valid


def test_assignment_needs_method_given(graph, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="method='given'"):
        Partitioner(graph, 2, tmp_path / "o", assignment=torch.zeros(1200, dtype=torch.long))
