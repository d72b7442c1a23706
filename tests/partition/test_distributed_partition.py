"""Multi-machine partitioning (``DistPartitioner``; ``pyg-dist-partition`` under torchrun).

Ground truth is the unpartitioned graph: every output passes the in-memory round-trip
checks (every node owned once, every edge once with its endpoints, rows and labels
equal, halos), with 1, 2 and 3 ranks, homogeneous and heterogeneous graphs with edge
attributes and times. Cuts stay within 1.3x of in-memory METIS and of the out-of-core
path. A rank that dies is named by the others and leaves no ``--out`` behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from pyg_dist.chunked import read_chunked, write_chunked
from pyg_dist.cli.partition import main as partition_main
from pyg_dist.datasets import community_graph, hetero_community_graph
from pyg_dist.format import _partition_io as io
from pyg_dist.partition import Partitioner
from pyg_dist.partition._distributed import DistPartitioner
from pyg_dist.partition._outofcore import OutOfCorePartitioner
from pyg_dist.format._tables import GraphTables
from pyg_dist.store import LocalGraphStore
from pyg_dist.testing import free_port
from pyg_dist.testing import run_ranks
from tests.support import kill_at_phase
from tests.support.scripts import run_script
from test_outofcore import _cut, _homo, assert_same_output
from test_roundtrip import check_roundtrip

REPO = Path(__file__).resolve().parents[2]
GRAPHS = {"homo": _homo, "hetero": lambda: hetero_community_graph(240, avg_degree=4,
                                                                    feat_dim=3, seed=1)}


def _chunks(tmp: Path, name: str, data, chunk_size: int = 61) -> Tuple[Path, GraphTables]:
    folder = tmp / f"chunks-{name}"
    write_chunked(data, folder, chunk_size=chunk_size)
    return folder, GraphTables.from_data(read_chunked(folder))


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize("method", ["random", pytest.param("metis", marks=pytest.mark.multiprocess)])
def test_one_rank_writes_what_the_in_memory_partitioner_writes(tmp_path: Path, graph: str,
                                                               method: str) -> None:
    """One rank runs every exchange with itself. Random dealing then equals the in-memory
    one, and so does the coarsen path on graphs this small (the cluster cap is one node,
    so METIS sees the graph itself): the same files, byte for byte. The random runs' budget
    is far below a partition's edges, so each CSC is built from several destination
    ranges."""
    folder, _ = _chunks(tmp_path, graph, GRAPHS[graph](), chunk_size=29)
    data = read_chunked(folder)
    budget = "32KB" if method == "random" else "1MB"  # METIS: room for the cluster graph
    for num_parts in (1, 2, 3):
        want, got = tmp_path / f"mem{num_parts}", tmp_path / f"dist{num_parts}"
        Partitioner(data, num_parts, want, method=method,
                    coarsen=True if method == "metis" else None, progress=False).generate()
        part = DistPartitioner(folder, num_parts, got, budget, method=method, progress=False)
        part.generate()
        assert_same_output(got, want, num_parts)
        assert {"assign", "order_edges", "copy_rows", "write"} <= set(part.timings.phases_s)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def partition_job(configs: List[Tuple[str, int, str, str, str]]) -> List[Tuple[str, float]]:
    """Runs on every rank: each config ``(input, num_parts, out, budget, method)`` in turn;
    returns the uid of each output and its seconds."""
    import pyg_dist
    from pyg_dist.partition._distributed import ArrayComm, DistPartitioner

    ctx = pyg_dist.init_process_group("gloo")
    comm = ArrayComm(ctx.rank, ctx.world_size)
    out = []
    for folder, num_parts, root, budget, method in configs:
        start = time.perf_counter()
        meta = DistPartitioner(folder, num_parts, root, budget, comm=comm, method=method,
                               progress=False).generate()
        out.append((meta.uid, time.perf_counter() - start))
    return out


def _in_memory_cut(data, num_parts: int, root: Path) -> int:
    return _cut(Partitioner(data, num_parts, root, progress=False).generate())


@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 3])
def test_ranks_write_valid_partitions_of_similar_cut(tmp_path: Path, cora, world: int) -> None:
    """2 and 3 ranks, homogeneous and heterogeneous, random and METIS: valid partitions;
    METIS cuts within 1.3x of the in-memory and out-of-core paths' (with 2 ranks on Cora
    and a community graph as well). The random runs' budget makes every exchange run in
    many rounds and every partition's CSC come from several destination ranges (METIS
    runs get room for the cluster graph)."""
    graphs = {"homo": _homo(), "hetero": GRAPHS["hetero"]()}
    plan = [("homo", 3, "random"), ("homo", 2, "metis"), ("hetero", 3, "metis"),
            ("hetero", 2, "random")]
    if world == 2:
        graphs.update(cora=cora, community=community_graph(3000, 10.0, 4, 4, seed=0))
        plan += [("cora", 2, "metis"), ("cora", 3, "metis"), ("community", 2, "metis"),
                 ("community", 3, "metis")]
    inputs = {name: _chunks(tmp_path, name, data, 500 if name in ("cora", "community") else 61)
              for name, data in graphs.items()}
    configs = [(str(inputs[g][0]), p, str(tmp_path / "out" / f"{g}-{p}-{m}"),
                "48KB" if m == "random" else "2MB", m) for g, p, m in plan]
    results = run_ranks(partition_job, world, configs, timeout=240)
    for i, (g, p, m) in enumerate(plan):
        root = tmp_path / "out" / f"{g}-{p}-{m}"
        assert len({r[i][0] for r in results}) == 1  # one uid on every rank
        meta = io.read_meta(root)
        assert meta.uid == results[0][i][0]
        assert check_roundtrip(inputs[g][1], root, p) == _cut(meta)
        owned = [sum(s.owned_nodes.values()) for s in meta.parts]
        total = sum(inputs[g][1].num_nodes.values())
        assert max(owned) <= 1.03 * total / p + len(inputs[g][1].num_nodes), owned
        if m == "metis":
            data = read_chunked(inputs[g][0])
            want = _in_memory_cut(data, p, tmp_path / "mem" / f"{g}-{p}")
            ooc = _cut(OutOfCorePartitioner(inputs[g][0], p, tmp_path / "ooc" / f"{g}-{p}",
                                            "2MB", coarsen=True, progress=False).generate())
            assert _cut(meta) <= 1.3 * want and _cut(meta) <= 1.3 * ooc, (g, p, _cut(meta),
                                                                          want, ooc)
            assert want <= 1.3 * _cut(meta) and ooc <= 1.3 * _cut(meta)
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


@pytest.mark.multiprocess
def test_each_machine_keeps_its_partitions_without_a_shared_file_system(tmp_path: Path
                                                                         ) -> None:
    """Ranks that cannot see each other's folders each write META and their partitions
    to their own ``--out``; together they hold the whole partitioning."""
    folder, tables = _chunks(tmp_path, "homo", _homo())
    roots = [tmp_path / f"machine{r}" / "out" for r in range(2)]
    run_ranks(_unshared_job, 2, str(folder), [str(r) for r in roots], timeout=120)
    assert sorted(p.name for p in roots[0].iterdir()) == ["META.json", "part_0", "part_1"]
    assert sorted(p.name for p in roots[1].iterdir()) == ["META.json", "part_2", "part_3"]
    for r, parts in ((0, (0, 1)), (1, (2, 3))):
        for p in parts:
            assert LocalGraphStore.from_partition(roots[r], p).part == p
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / io.META_FILE).write_bytes((roots[0] / io.META_FILE).read_bytes())
    assert (roots[1] / io.META_FILE).read_bytes() == (roots[0] / io.META_FILE).read_bytes()
    for r, parts in ((0, (0, 1)), (1, (2, 3))):
        for p in parts:
            os.replace(roots[r] / f"part_{p}", merged / f"part_{p}")
    assert check_roundtrip(tables, merged, 4) >= 0


def _unshared_job(folder: str, roots: List[str]) -> str:
    import pyg_dist
    from pyg_dist.partition._distributed import ArrayComm, DistPartitioner
    from pyg_dist.partition._distributed.team import RankTeam

    # as if every rank ran on a machine of its own: it sees no other rank's folder
    RankTeam.visible = lambda self, folders, token: [self.comm.rank]

    ctx = pyg_dist.init_process_group("gloo")
    return DistPartitioner(folder, 4, roots[ctx.rank], "2MB", method="metis",
                           comm=ArrayComm(ctx.rank, ctx.world_size), progress=False).generate().uid


def _torchrun(args: List[str], port: int) -> subprocess.Popen:
    """``torchrun --nproc-per-node=2 -m pyg_dist.cli.partition args`` (the real one)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
           "--master-addr=127.0.0.1", f"--master-port={port}", "--max-restarts=0",
           "-m", "pyg_dist.cli.partition", *args]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                "PYG_DIST_RPC_TIMEOUT": "20"}
    return subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _one_machine(args: List[str], timeout: float) -> Tuple[int, str]:
    """``torchrun --nproc-per-node=2 -m pyg_dist.cli.partition args``, its ranks forked
    from a warm fork server (:func:`tests.support.scripts.run_script`)."""
    run = run_script("pyg_dist.cli.partition", args, 2, module=True, timeout=timeout,
                     cwd=REPO, extra_env={"OMP_NUM_THREADS": "1", "PYG_DIST_RPC_TIMEOUT": "20"})
    if run.timed_out:
        pytest.fail(run.describe())
    return run.returncode, run.output


def _wait(proc: subprocess.Popen, timeout: float) -> Tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout:.0f}s:\n{out[-8000:]}")
    return proc.returncode, out


@pytest.mark.multiprocess
def test_torchrun_command_partitions_a_chunked_graph(tmp_path: Path) -> None:
    """The README's command: ``torchrun ... pyg-dist-partition --input DIR`` on 2 ranks."""
    folder, tables = _chunks(tmp_path, "hetero", GRAPHS["hetero"]())
    out = tmp_path / "out"
    code, text = _wait(_torchrun(["--input", str(folder), "--out", str(out), "--num-parts",
                                  "2", "--memory-budget", "4MB"], free_port()), 180)
    assert code == 0, text[-8000:]
    assert "on 2 ranks" in text and "phases:" in text
    assert check_roundtrip(tables, out, 2) == _cut(io.read_meta(out))


def _leftovers(folder: Path) -> List[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def _killed_rank(argv: List[str]) -> Tuple[int, str]:
    """``tests/support/kill_at_phase.py``'s entry point on this rank (``argv``: its
    arguments; it SIGKILLs the rank it names at the phase it names): the exit code and
    what this rank printed on stderr."""
    import contextlib
    import io as text_io

    err, code = text_io.StringIO(), 0
    with contextlib.redirect_stderr(err):
        try:
            kill_at_phase.main(argv)
        except SystemExit as exc:  # the CLI's exit code, as ``python -m`` would give it
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue()


@pytest.mark.multiprocess
def test_rank_that_dies_is_named_and_leaves_no_output(tmp_path: Path) -> None:
    """Rank 1 is SIGKILLed after ordering edges; rank 0, left running as on a machine of
    its own (ranks forked and watched one by one: nothing stops rank 0 for it), exits
    non-zero naming rank 1 and ``--out`` never appears; the next run completes and
    removes what the killed rank left."""
    folder, tables = _chunks(tmp_path, "homo", _homo())
    out = tmp_path / "out"
    args = ["--input", str(folder), "--out", str(out), "--num-parts", "2",
            "--memory-budget", "4MB", "--quiet"]
    argv = ["order_edges", "1", str(out), "-m", "pyg_dist.cli.partition", *args]
    code0, text0 = run_ranks(_killed_rank, 2, argv, timeout=120, may_die=[1],
                             extra_env={"PYG_DIST_RPC_TIMEOUT": "20"})[0]
    assert code0 != 0, text0
    assert "pyg-dist-partition (rank 0): error:" in text0, text0[-8000:]
    assert "rank 1 has sent no heartbeat" in text0 or "rank 1 failed" in text0, text0[-8000:]
    assert not out.exists()
    code, text = _one_machine(args, 120)
    assert code == 0, text[-8000:]
    assert check_roundtrip(tables, out, 2) >= 0
    assert not _leftovers(tmp_path)


def _cli_rank(argvs: List[List[str]]) -> Tuple[int, str]:
    """``pyg-dist-partition`` on this rank with this rank's arguments: its exit code and
    what it printed on stderr."""
    import contextlib
    import io as text_io

    err = text_io.StringIO()
    with contextlib.redirect_stderr(err):
        code = partition_main(argvs[int(os.environ["RANK"])])
    return code, err.getvalue()


@pytest.mark.multiprocess
def test_ranks_running_different_commands_stop_naming_the_option(tmp_path: Path) -> None:
    """Each rank runs the CLI's entry point with its own arguments (ranks forked, as
    torchrun would run them; watched one by one, as two machines' agents would)."""
    folder, _ = _chunks(tmp_path, "homo", _homo())
    args = ["--input", str(folder), "--out", str(tmp_path / "out"), "--num-parts", "2",
            "--memory-budget", "4MB", "--quiet"]
    results = run_ranks(_cli_rank, 2, [args + ["--seed", "1"], args + ["--seed", "2"]],
                        timeout=120, extra_env={"PYG_DIST_RPC_TIMEOUT": "20"})
    for rank, (code, text) in enumerate(results):
        assert code != 0, (rank, text)
        assert "ranks disagree on seed" in text, (rank, text)
    assert not (tmp_path / "out").exists() and not _leftovers(tmp_path)


@pytest.mark.parametrize("extra,expected", [
    (["--pyg-extras"], "--pyg-extras is not built for multi-machine partitioning"),
    (["--method", "kaminpar"], "method=kaminpar is not available for multi-machine"),
    (["--no-coarsen"], "coarsen=False is not available for multi-machine partitioning"),
    (["--memory-budget", "lots"], "is not a size"),
])
def test_cli_options_not_built_under_torchrun(tmp_path: Path, capsys, monkeypatch, extra,
                                              expected) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    folder, _ = _chunks(tmp_path, "homo", _homo())
    code = partition_main(["--input", str(folder), "--out", str(tmp_path / "out"),
                           "--num-parts", "2", *extra])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_cli_under_torchrun_needs_a_chunked_input(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    code = partition_main(["--dataset", "synthetic", "--out", str(tmp_path / "out"),
                           "--num-parts", "2"])
    assert code == 2 and "pass --input DIR" in capsys.readouterr().err


def test_cluster_graph_too_large_for_the_budget_is_dealt_by_size(tmp_path: Path) -> None:
    """A random graph keeps most edges between clusters: rank 0 deals the clusters by
    size instead of running METIS over the budget, and refinement does the rest."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(0)
    data = Data(edge_index=torch.randint(0, 3000, (2, 30000), generator=gen),
                x=torch.randn(3000, 2, generator=gen), num_nodes=3000)
    data.train_mask = torch.rand(3000, generator=gen) < 0.2
    folder, tables = _chunks(tmp_path, "random", data, chunk_size=4000)
    with pytest.warns(UserWarning, match="little community structure"):
        meta = DistPartitioner(folder, 2, tmp_path / "out", "1MB", progress=False).generate()
    assert check_roundtrip(tables, tmp_path / "out", 2) == _cut(meta)
    owned = [sum(s.owned_nodes.values()) for s in meta.parts]
    assert max(owned) <= 1.03 * 3000 / 2 + 1, owned


@pytest.mark.multiprocess
def test_cluster_graph_over_the_budget_is_never_held_whole(tmp_path: Path, monkeypatch
                                                            ) -> None:
    """Summing the cluster graph stops once a rank holds more entries than METIS may
    take within the budget: the most entries held stays near that limit, far below
    the cluster graph's size."""
    import torch
    from torch_geometric.data import Data

    from pyg_dist.partition._assign import METIS_BYTES_PER_ADJACENCY_BYTE
    from pyg_dist.partition._coarsen import KeySums
    from pyg_dist.partition._distributed import assign

    held = []

    class Recording(KeySums):
        def merge(self):
            super().merge()
            held.append(self.keys.shape[0])
            return self

    monkeypatch.setattr(assign, "KeySums", Recording)
    gen = torch.Generator().manual_seed(0)
    data = Data(edge_index=torch.randint(0, 3000, (2, 30000), generator=gen), num_nodes=3000)
    folder, _ = _chunks(tmp_path, "random", data, chunk_size=1000)
    DistPartitioner(folder, 2, tmp_path / "whole", "64MB", progress=False).generate()
    whole, held = max(held), []  # the cluster graph, summed in full for METIS
    with pytest.warns(UserWarning, match="little community structure"):
        DistPartitioner(folder, 2, tmp_path / "out", "64KB", progress=False).generate()
    limit = 64 * 1024 // (8 * METIS_BYTES_PER_ADJACENCY_BYTE)
    assert whole > 10 * limit
    assert held and max(held) <= 4 * limit, (max(held), limit, whole)


@pytest.mark.parametrize("slots", ["int32", "int64"])
def test_local_neighbour_lists_equal_the_symmetric_csr(tmp_path: Path, monkeypatch,
                                                       slots: str) -> None:
    """One rank's lists, built window by window (a tiny window: many), equal the
    in-memory symmetric CSR METIS gets (int32 slots, or int64 where a rank has more
    slots than int32 holds); so do the out-of-core path's windowed lists."""
    import numpy as np

    from pyg_dist.partition._distributed import ArrayComm, graph as local_graph
    from pyg_dist.partition._distributed.graph import EdgeFiles, build_local_graph

    if slots == "int64":
        monkeypatch.setattr(local_graph, "MAX_INT32_SLOTS", 10)
    from pyg_dist.partition._graph_kernels import (count_lower, dedup_rows, fill_lower, mirror_fill,
                                            mirror_fill_windows, mirror_pointers)
    from pyg_dist.partition._outofcore.scratch import Scratch
    from pyg_dist.partition._outofcore.source import open_source

    folder, tables = _chunks(tmp_path, "hetero", GRAPHS["hetero"]())
    source, _ = open_source(folder, 2, "1MB")
    graph = build_local_graph(ArrayComm(), source, EdgeFiles.share(ArrayComm(), source),
                              Scratch(tmp_path / "scratch"), 64, window_bytes=2000)
    offsets, total = {}, 0
    for t, n in tables.num_nodes.items():
        offsets[t], total = total, total + n
    counts = np.zeros(total + 1, dtype=np.int64)
    for (s, _, d), index in tables.edge_index.items():
        count_lower(index[0].numpy(), index[1].numpy(), offsets[s], offsets[d], counts)
    ptr = np.cumsum(counts)
    upper, cursor = np.zeros(int(ptr[-1]), dtype=np.int64), ptr[:-1].copy()
    for (s, _, d), index in tables.edge_index.items():
        fill_lower(index[0].numpy(), index[1].numpy(), offsets[s], offsets[d], cursor, upper)
    ptr = dedup_rows(ptr, upper)
    xadj = mirror_pointers(ptr, upper)
    adj = np.zeros(int(xadj[-1]), dtype=np.int64)
    mirror_fill(ptr, upper, xadj, adj)
    assert graph.ghosts.size == 0 and np.array_equal(graph.xadj, xadj)
    assert graph.adj.dtype == np.dtype(slots) and np.array_equal(np.asarray(graph.adj), adj)
    windowed = np.zeros_like(adj)
    assert mirror_fill_windows(ptr, upper, xadj, windowed, 50) > 5
    assert np.array_equal(windowed, adj)
