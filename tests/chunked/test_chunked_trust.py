"""A chunked folder is untrusted: it reads nothing outside itself, only regular files, and
its counts are checked before anything is sized by them.

Every bad folder must give exit code 2 and one line, within 10 s, and a canary file
outside the folder must never be read: its unique content never appears in the output.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pytest

from pyg_dist.chunked import ChunkedFormatError, ChunkedGraph, read_chunked, write_chunked
from pyg_dist.cli.partition import main as partition_main

META = "metadata.json"
#: the canary's content; error messages that quote files show their first bytes, so the
#: check is for its first six characters (no path or message holds them)
CANARY = "QZJXWK-canary-content-never-print-me"
LEAK = CANARY[:6]
EDGES = "_N:_E:_N"


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid folder: 60 nodes, three .npy edge chunks, .npy features."""
    from pyg_dist.datasets import community_graph

    folder = tmp_path_factory.mktemp("good") / "graph"
    write_chunked(community_graph(60, 4.0, 3, 3, seed=0), folder, chunk_size=80)
    return folder


@pytest.fixture
def place(good: Path, tmp_path: Path) -> Path:
    """``tmp_path/inside/graph`` (a copy of the good folder) beside the canary
    ``tmp_path/inside/canary.npy`` (outside the graph folder) whose content is text."""
    folder = tmp_path / "inside" / "graph"
    shutil.copytree(good, folder)
    (folder.parent / "canary.npy").write_text(CANARY + "\n")
    return folder


def _edit(folder: Path, change: Callable[[Dict], None]) -> None:
    meta = json.loads((folder / META).read_text())
    change(meta)
    (folder / META).write_text(json.dumps(meta))


def _list_edge_chunk(folder: Path, path: str, index: int = 1) -> None:
    _edit(folder, lambda m: m["edges"][EDGES]["data"].__setitem__(index, path))


def _run(argv: List[str], capsys) -> tuple:
    start = time.perf_counter()
    code = partition_main(argv)
    seconds = time.perf_counter() - start
    captured = capsys.readouterr()
    return code, captured.out + captured.err, seconds


def _refused(folder: Path, tmp_path: Path, capsys, expect: str, *extra: str) -> str:
    """Runs the CLI on ``folder`` in memory and with --memory-budget: each must exit 2
    with one line containing ``expect``, within 10 s, never showing the canary."""
    for budget in ([], ["--memory-budget", "64MB"]):
        out = tmp_path / f"out{len(budget)}"
        code, output, seconds = _run(["--input", str(folder), "--num-parts", "2", "--out",
                                      str(out), "--quiet", *budget, *extra], capsys)
        assert code == 2, output
        assert len(output.strip().splitlines()) == 1, output
        assert output.startswith("pyg-dist-partition: error: "), output
        assert expect in output, (expect, output)
        assert LEAK not in output and "Traceback" not in output
        assert seconds < 10, seconds
        assert not out.exists()
    return output


@pytest.mark.timeout(60)
def test_absolute_path_is_refused(place: Path, tmp_path: Path, capsys) -> None:
    _list_edge_chunk(place, str(place.parent / "canary.npy"))
    _refused(place, tmp_path, capsys, "is absolute")


@pytest.mark.timeout(60)
def test_dotdot_path_is_refused(place: Path, tmp_path: Path, capsys) -> None:
    _list_edge_chunk(place, "../canary.npy")
    _refused(place, tmp_path, capsys, "leads outside")


@pytest.mark.timeout(60)
def test_symlink_out_is_refused(place: Path, tmp_path: Path, capsys) -> None:
    (place / "edges" / "link.npy").symlink_to(place.parent / "canary.npy")
    _list_edge_chunk(place, "edges/link.npy")
    _refused(place, tmp_path, capsys, "leads outside")


@pytest.mark.timeout(60)
def test_metadata_symlink_out_is_refused(place: Path, tmp_path: Path, capsys) -> None:
    outside = place.parent / "meta-outside.json"
    shutil.move(str(place / META), outside)
    (place / META).symlink_to(outside)
    _refused(place, tmp_path, capsys, "outside")


@pytest.mark.timeout(60)
def test_dev_zero_is_refused_even_when_external_paths_are_allowed(place: Path, tmp_path: Path,
                                                                 capsys) -> None:
    _list_edge_chunk(place, "/dev/zero")
    _refused(place, tmp_path, capsys, "is absolute")
    _refused(place, tmp_path, capsys, "is a character device", "--allow-external-paths")


@pytest.mark.timeout(60)
def test_fifo_is_never_opened(place: Path, tmp_path: Path, capsys) -> None:
    """Opening a FIFO for reading would block: it must be refused by its type."""
    os.mkfifo(place / "edges" / "pipe.npy")
    _list_edge_chunk(place, "edges/pipe.npy")
    _refused(place, tmp_path, capsys, "is a FIFO")
    os.mkfifo(place.parent / "outside-pipe")  # outside: refused by its path, never opened
    _list_edge_chunk(place, str(place.parent / "outside-pipe"))
    _refused(place, tmp_path, capsys, "is absolute")


@pytest.mark.timeout(60)
def test_directory_is_refused(place: Path, tmp_path: Path, capsys) -> None:
    _list_edge_chunk(place, "edges")
    _refused(place, tmp_path, capsys, "is a directory")


@pytest.mark.timeout(60)
def test_socket_is_refused(place: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        monkeypatch.chdir(place)  # a socket path must be short: bind it relative to the folder
        sock.bind("s.npy")
        _list_edge_chunk(place, "s.npy")
        _refused(place, tmp_path, capsys, "is a socket")
    finally:
        sock.close()


@pytest.mark.timeout(60)
def test_huge_node_count_without_data_is_refused(place: Path, tmp_path: Path, capsys) -> None:
    """10^15 nodes and no node data: no file bounds the count, the memory check does."""
    def forge(meta: Dict) -> None:
        meta["num_nodes_per_chunk"] = [[10**15]]
        meta.pop("node_data")
    _edit(place, forge)
    _refused(place, tmp_path, capsys, "1000000000000000 nodes")


def test_huge_node_count_is_refused_by_the_multi_machine_partitioner(place: Path,
                                                                     tmp_path: Path) -> None:
    """The same check on one rank of :class:`DistPartitioner` (same ``open_source``)."""
    from pyg_dist.chunked import ChunkedTooLargeError
    from pyg_dist.partition._distributed import DistPartitioner

    _edit(place, lambda m: (m.update(num_nodes_per_chunk=[[10**15]]), m.pop("node_data")))
    with pytest.raises(ChunkedTooLargeError, match="more than the"):
        DistPartitioner(place, 2, tmp_path / "o", "64MB", progress=False)
    _list_edge_chunk(place, "../canary.npy")
    with pytest.raises(ChunkedFormatError, match="leads outside"):
        DistPartitioner(place, 2, tmp_path / "o", "64MB", progress=False)


@pytest.mark.timeout(60)
def test_forged_text_edge_count_is_refused(tmp_path: Path, capsys) -> None:
    """10^12 edges in text chunks of a few hundred bytes: refused by the chunks' sizes."""
    from pyg_dist.datasets import community_graph

    folder = tmp_path / "csv"
    write_chunked(community_graph(60, 4.0, 3, 3, seed=0), folder, chunk_size=80,
                  edge_format="csv")
    _edit(folder, lambda m: (m.pop("num_edges_per_chunk"),
                             m.update(num_edges_per_type=[10**12]), m.pop("edge_data", None)))
    _refused(folder, tmp_path, capsys, "can hold at most")


@pytest.mark.timeout(60)
def test_forged_npy_header_is_refused(place: Path, tmp_path: Path, capsys) -> None:
    """A .npy header claiming more rows than the file holds (and metadata agreeing)."""
    path = place / json.loads((place / META).read_text())["node_data"]["_N"]["x"]["data"][0]
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**12, 3)}
    _edit(place, lambda m: (m.update(num_nodes_per_chunk=[[10**12]]),
                            m.update(node_data={"_N": {"x": m["node_data"]["_N"]["x"]}})))
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\0" * 64)
    _refused(place, tmp_path, capsys, "truncated or forged")


def test_messages_never_quote_contents(place: Path) -> None:
    """A non-.npy chunk (the canary, allowed in explicitly) is refused by name only."""
    _list_edge_chunk(place, str(place.parent / "canary.npy"))
    with pytest.raises(ChunkedFormatError) as info:
        ChunkedGraph.open(place, allow_external_paths=True)
    assert "not a .npy file" in str(info.value) and LEAK not in str(info.value)


def test_allow_external_paths_reads_an_absolute_path(place: Path, good: Path,
                                                     tmp_path: Path, capsys) -> None:
    """DGL's format allows absolute paths: with the flag (and keyword) they work."""
    rel = json.loads((place / META).read_text())["edges"][EDGES]["data"][1]
    moved = tmp_path / "elsewhere.npy"
    shutil.move(str(place / rel), moved)
    _list_edge_chunk(place, str(moved))
    with pytest.raises(ChunkedFormatError, match="is absolute"):
        ChunkedGraph.open(place)
    want = read_chunked(good)
    got = read_chunked(place, allow_external_paths=True)
    assert np.array_equal(got.edge_index.numpy(), want.edge_index.numpy())
    for budget in ([], ["--memory-budget", "64MB"]):
        out = tmp_path / f"parts{len(budget)}"
        code, output, _ = _run(["--input", str(place), "--num-parts", "2", "--out", str(out),
                                "--quiet", "--allow-external-paths", *budget], capsys)
        assert code == 0, output
        assert (out / "META.json").is_file()


def test_allow_external_paths_needs_input(tmp_path: Path, capsys) -> None:
    code, output, _ = _run(["--dataset", "synthetic", "--num-nodes", "50", "--num-parts", "2",
                            "--out", str(tmp_path / "o"), "--allow-external-paths"], capsys)
    assert code == 2 and "allow_external_paths applies to a chunked graph folder source " \
        "(--input DIR)" in output, output
