"""Assigning nodes to partitions with KaMinPar (optional dependency ``kaminpar``).

KaMinPar is a maintained shared-memory multilevel partitioner (KIT; MIT licence).
Its Python binding builds graphs only from files, so the symmetric CSR that the
METIS path builds is written once to a temporary file in the binary ParHIP format
(64-bit offsets, 32-bit neighbour ids while the node count allows, no weights) and
loaded from there. Our own copy of the adjacency is dropped while KaMinPar holds its
one, and read back (32-bit) from the file for the balance post-passes; the file is
removed at the end.

KaMinPar balances one vertex weight. pyg_dist gives every node weight 1, so KaMinPar
balances the total node count; per-node-type and train-node balance are then
enforced by the same post-passes that tidy METIS's result
(:func:`pyg_dist.partition._assign.balance_nodes` and
:func:`~pyg_dist.partition._assign.balance_train`), which move the boundary nodes
whose move cuts the fewest edges.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Union

import numpy as np

from pyg_dist.partition._assign import (AssignInput, Assignment, AssignOptions, balance_nodes,
                                       balance_train)
from pyg_dist.partition._common import node_groups, split_by_type

CONTEXTS = ("default", "terapart", "fast", "eco", "strong", "terapart-eco")
# contexts built for graphs stored compressed in memory (loaded with compress=True)
COMPRESSED_CONTEXTS = ("terapart", "terapart-eco")
_HEADER_BYTES = 24
_CHUNK = 1 << 24  # entries written per block: bounded temporaries on large graphs
INSTALL_HINT = "pip install 'pyg_dist[kaminpar]' (or: pip install kaminpar)"


def kaminpar_module():
    """The ``kaminpar`` package; ``ImportError`` with one line saying how to install it."""
    try:
        import kaminpar
    except ImportError as exc:
        raise ImportError(f"method='kaminpar' needs the kaminpar package: {INSTALL_HINT}"
                          ) from exc
    return kaminpar


def write_parhip(path: Union[str, Path], xadj: np.ndarray, adjncy: np.ndarray) -> None:
    """Writes a symmetric CSR graph in KaMinPar's binary ParHIP format, block by block.

    Header: version, n, m (uint64 each). Version bits (set = absent / 32-bit): 0 no
    edge weights, 1 no vertex weights, 2 32-bit offsets, 3 32-bit ids, 4 32-bit vertex
    weights, 5 32-bit edge weights. Offsets are byte positions in the file.

    Args:
        path: the file to write.
        xadj (np.ndarray): ``n + 1`` row offsets (int64).
        adjncy (np.ndarray): neighbour ids, every edge in both directions.
    """
    n, m = xadj.shape[0] - 1, int(adjncy.shape[0])
    id32 = n <= np.iinfo(np.int32).max
    id_type = np.uint32 if id32 else np.uint64
    version = 0b000011 | (0b001000 if id32 else 0)
    base = _HEADER_BYTES + (n + 1) * 8
    width = np.dtype(id_type).itemsize
    with open(path, "wb") as f:
        f.write(np.array([version, n, m], dtype=np.uint64).tobytes())
        for lo in range(0, n + 1, _CHUNK):
            f.write((xadj[lo:lo + _CHUNK].astype(np.uint64) * width + base).tobytes())
        for lo in range(0, m, _CHUNK):
            f.write(adjncy[lo:lo + _CHUNK].astype(id_type).tobytes())


def read_parhip_neighbours(path: Union[str, Path]) -> np.ndarray:
    """The neighbour ids of a file :func:`write_parhip` wrote, as stored (uint32 or
    uint64): half the memory of the int64 original while ids fit in 32 bits."""
    header = np.fromfile(path, dtype=np.uint64, count=3)
    version, n, m = (int(v) for v in header)
    id_type = np.uint32 if version & 0b001000 else np.uint64
    return np.fromfile(path, dtype=id_type, count=m, offset=_HEADER_BYTES + (n + 1) * 8)


def partition_parhip(path: Union[str, Path], num_parts: int, seed: int,
                     context: str = "default", threads: Optional[int] = None,
                     epsilon: float = 0.03, phases: Optional[Dict[str, float]] = None
                     ) -> np.ndarray:
    """KaMinPar's partition of a graph in a ParHIP file (see :func:`kaminpar_parts`)."""
    kaminpar = kaminpar_module()
    if context not in CONTEXTS:
        raise ValueError(f"unknown KaMinPar context '{context}' (choose from {CONTEXTS})")
    phases = {} if phases is None else phases
    start = time.perf_counter()
    graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP,
                                compress=context in COMPRESSED_CONTEXTS)
    phases["load"], start = time.perf_counter() - start, time.perf_counter()
    kaminpar.reseed(int(seed))
    solver = kaminpar.KaMinPar(num_threads=_threads(threads),
                               ctx=kaminpar.context_by_name(context))
    parts = np.asarray(solver.compute_partition(graph, int(num_parts), float(epsilon)),
                       dtype=np.int64)
    del graph, solver  # KaMinPar's copy of the graph goes before the caller goes on
    phases["kaminpar"] = time.perf_counter() - start
    return parts


def kaminpar_parts(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, seed: int,
                   context: str = "default", threads: Optional[int] = None,
                   epsilon: float = 0.03, phases: Optional[Dict[str, float]] = None
                   ) -> np.ndarray:
    """KaMinPar's partition of a symmetric CSR graph with unit vertex weights.

    The graph goes through a temporary ParHIP file (under ``TMPDIR``: ``8 (n + 1) +
    4 m`` bytes for ``n`` nodes and ``m`` adjacency entries), removed afterwards.

    Args:
        xadj, adjncy: the symmetric, loop-free CSR adjacency (as METIS takes it).
        num_parts (int): number of blocks.
        seed (int): KaMinPar's random seed (the result is deterministic for a given
            seed and thread count).
        context (str): KaMinPar preset: ``"default"``; ``"terapart"`` (memory
            efficient: the graph is held compressed); see :data:`CONTEXTS`.
        threads (int, optional): worker threads; ``None``: ``OMP_NUM_THREADS`` if
            set, else every CPU this process may run on.
        epsilon (float): allowed imbalance (``0.03``: no block over 1.03x the mean).
        phases (dict, optional): receives seconds for ``"parhip"`` (writing the
            temporary file), ``"load"`` (KaMinPar reading it) and ``"kaminpar"``
            (partitioning).

    Returns:
        The block of every node (int64).
    """
    kaminpar_module()
    phases = {} if phases is None else phases
    with tempfile.TemporaryDirectory(prefix="pyg_dist_kaminpar_") as tmp:
        start, path = time.perf_counter(), Path(tmp) / "graph.parhip"
        write_parhip(path, xadj, adjncy)
        phases["parhip"] = time.perf_counter() - start
        return partition_parhip(path, num_parts, seed, context, threads, epsilon, phases)


def _threads(threads: Optional[int]) -> int:
    if threads is not None:
        return max(int(threads), 1)
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(len(os.sched_getaffinity(0)), 1)


def kaminpar_assign(graph: AssignInput, num_parts: int, options: AssignOptions,
                    context: str = "default", threads: Optional[int] = None) -> Assignment:
    """KaMinPar on the symmetrised homogeneous view of all node and edge types.

    The adjacency is the one METIS gets (every edge type, both directions). KaMinPar
    balances node counts (unit vertex weights, 3% imbalance); the per-node-type and
    train-node balance that METIS gets as extra constraints come from the post-passes
    afterwards (see the module docstring). Phases: ``"adjacency"``, ``"parhip"``
    (writing the file), ``"load"``, ``"kaminpar"``, ``"balance"``.
    """
    kaminpar_module()  # fail before building anything when it is missing
    phases, start = {}, time.perf_counter()
    xadj, adjncy = graph.csr()
    phases["adjacency"] = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="pyg_dist_kaminpar_") as tmp:
        start, path = time.perf_counter(), Path(tmp) / "graph.parhip"
        write_parhip(path, xadj, adjncy)
        graph.drop(adjncy)
        del adjncy  # KaMinPar holds its own copy while it runs: ours would double it
        phases["parhip"] = time.perf_counter() - start
        parts = partition_parhip(path, num_parts, options.seed, context, threads,
                                 phases=phases)
        start = time.perf_counter()
        adjncy = read_parhip_neighbours(path)  # back for the balance post-passes
    group = node_groups(graph.num_nodes)
    balance_nodes(parts, [group == i for i in range(len(graph.num_nodes))], xadj, adjncy,
                  num_parts)
    del group
    balance_train(parts, np.concatenate(list(graph.trains().values())), xadj, adjncy,
                  num_parts)
    phases["balance"] = time.perf_counter() - start
    return Assignment(split_by_type(parts, graph.num_nodes), phases)
