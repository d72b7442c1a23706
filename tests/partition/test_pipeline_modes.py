"""The one library entry, ``pyg_dist.partition.partition``: it picks the mode, and every
option either works in every mode or fails with one message in each mode refusing it."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from pyg_dist.chunked import write_chunked
from pyg_dist.datasets import community_graph
from pyg_dist.format import _partition_io as io
from pyg_dist.partition import partition
from pyg_dist.partition._api import choose_mode
from pyg_dist.partition._distributed import ArrayComm
from pyg_dist.partition._options import (FOLDER_ONLY, MODES, REFUSED, PartitionOptionError,
                                        method_label, refusal)

NODES = 120

#: option settings walked in every mode: name (as _options.py names it) -> kwargs
SETTINGS: Dict[str, dict] = {
    "method=metis": {},
    "method=random": {"method": "random"},
    "method=kaminpar": {"method": "kaminpar"},
    "method=given": {"method": "given",
                     "assignment": torch.arange(NODES) % 2},
    "coarsen=True": {"coarsen": True},
    "coarsen=False": {"coarsen": False},
    "recursive": {"recursive": True},
    "allow_external_paths": {"allow_external_paths": True},
    "memory_budget": {"memory_budget": "64MB"},
}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    graph = community_graph(NODES, avg_degree=6, feat_dim=4, num_classes=3, seed=3)
    folder = tmp_path_factory.mktemp("chunks") / "g"
    write_chunked(graph, folder, chunk_size=200)
    return graph, folder


def _run(graphs, mode: str, kwargs: dict, out: Path):
    """``partition`` in ``mode``: a graph in memory, or the chunked folder (out of core
    with a budget, or one rank of a multi-machine run)."""
    graph, folder = graphs
    kwargs = dict(kwargs)
    if mode == "out_of_core":
        kwargs.setdefault("memory_budget", "64MB")
    source = graph if mode == "memory" else folder
    comm = ArrayComm() if mode == "multi_machine" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return partition(source, out, 2, progress=False, comm=comm, mode=mode, **kwargs)


def _needs_kaminpar(name: str) -> None:
    if name == "method=kaminpar":
        pytest.importorskip("kaminpar")


@pytest.mark.multiprocess  # the multi-machine mode runs METIS in a child process
@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_option_runs_or_fails_the_same_way_in_every_mode(graphs, tmp_path: Path,
                                                                  name: str) -> None:
    _needs_kaminpar(name)
    errors: List[str] = []
    for mode in MODES:
        out = tmp_path / mode
        refused = (name, mode) in REFUSED or (mode == "memory" and name in FOLDER_ONLY)
        if refused:
            with pytest.raises(PartitionOptionError) as info:
                _run(graphs, mode, SETTINGS[name], out)
            message = str(info.value)
            assert message == (refusal(name, mode) if (name, mode) in REFUSED
                               else FOLDER_ONLY[name])
            assert "\n" not in message and not out.exists()  # before any work
            errors.append(message)
            continue
        result = _run(graphs, mode, SETTINGS[name], out)
        meta = io.read_meta(out)
        assert result.mode == mode and meta.uid == result.meta.uid and meta.num_parts == 2
        assert sum(meta.num_nodes.values()) == NODES
        kwargs = SETTINGS[name]
        if mode != "multi_machine":  # several ranks always run METIS on the clustering
            assert meta.method == method_label(kwargs.get("method", "metis"),
                                               kwargs.get("recursive"))
    assert len(set(errors)) <= 1  # one message, whichever mode refuses


@pytest.mark.parametrize("name", ["method=random", "method=given"])
def test_memory_and_out_of_core_write_the_same_partitioning(graphs, tmp_path: Path,
                                                            name: str) -> None:
    first = _run(graphs, "memory", SETTINGS[name], tmp_path / "m").meta
    second = _run(graphs, "out_of_core", SETTINGS[name], tmp_path / "o").meta
    assert first.uid == second.uid and first.node_offsets == second.node_offsets


def test_the_mode_comes_from_the_source_and_the_environment(graphs, monkeypatch) -> None:
    graph, folder = graphs
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert choose_mode(graph) == "memory" and choose_mode(folder) == "memory"
    assert choose_mode(folder, memory_budget="1GB") == "out_of_core"
    assert choose_mode(graph, memory_budget="1GB") == "memory"  # then refused: FOLDER_ONLY
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert choose_mode(folder) == "multi_machine"
    with pytest.raises(PartitionOptionError, match="pass --input DIR"):
        choose_mode(graph)


def test_unknown_method_and_mismatched_options_fail_alike_in_every_mode(graphs,
                                                                       tmp_path: Path) -> None:
    cases = [({"method": "nope"}, "unknown partition method 'nope'"),
             ({"method": "random", "coarsen": True}, "coarsen=True applies to method='metis'"),
             ({"method": "random", "recursive": False}, "recursive=False applies to"),
             ({"assignment": torch.zeros(NODES, dtype=torch.long)},
              "assignment= is used with method='given'"),
             ({"method": "given"}, "method='given' needs assignment=")]
    for kwargs, expected in cases:
        messages = set()
        for mode in MODES:
            with pytest.raises(PartitionOptionError, match=expected) as info:
                _run(graphs, mode, kwargs, tmp_path / f"{mode}-x")
            messages.add(str(info.value))
        assert len(messages) == 1, messages
