"""Compiling (or loading from numba's on-disk cache) every kernel before it is needed.

numba compiles a kernel on its first call for each new combination of argument
types. On a fresh clone that takes seconds per kernel, and a process that compiles
while serving its first RPC can make a waiting peer time out. :func:`warm_up` calls
every kernel used during training and serving on tiny inputs, through the same
wrappers and with exactly the argument types used at run time, so no later call
compiles again. Call it before joining RPC; it is idempotent and free the second
time in a process.
"""
from __future__ import annotations

import threading
import time

import torch

from pyg_dist.rpc import _routing as routing
from pyg_dist.sampler import _sample_kernels as kernels, _labor as labor, _gather as row_copy
from pyg_dist.sampler._node_index import NodeIndex
from pyg_dist.sampler._runs import seed_runs, take_runs

_LOCK = threading.Lock()
_DONE = False


def warm_up() -> float:
    """Compiles or loads every numba kernel of sampling, serving and feature fetching.

    Returns:
        float: seconds spent (about ``0`` when this process already warmed up).
    """
    global _DONE
    with _LOCK:
        if _DONE:
            return 0.0
        start = time.perf_counter()
        _sampling_kernels()
        _labor_kernels()
        _feature_kernels()
        _index_kernels()
        _DONE = True
        return time.perf_counter() - start


def _tiny_csc(index_dtype: torch.dtype):
    """Three destination rows: degrees 2, 0 and 80 (above the Floyd threshold)."""
    indptr = torch.tensor([0, 2, 2, 82], dtype=torch.long)
    indices = (torch.arange(82) % 5).to(index_dtype)
    return indptr, indices


def _sampling_kernels() -> None:
    """Uniform (Floyd, Fisher-Yates, with replacement) for int64 and int32 ``indices``,
    reading edges' original ids from int64 and int32 tables (id files hold either);
    weighted and temporal (uniform and last) share one kernel."""
    seeds = torch.tensor([0, 1, 2, 2])
    for dtype in (torch.int64, torch.int32):
        indptr, indices = _tiny_csc(dtype)
        for fanout, replace in ((1, False), (70, False), (3, True), (-1, False)):
            kernels.sample_one_hop(indptr, indices, seeds, fanout, replace, 1)
        for id_dtype in (torch.int64, torch.int32):  # id tables of either dtype
            ids = torch.arange(indices.numel(), dtype=id_dtype)
            kernels.sample_one_hop(indptr, indices, seeds, 3, False, 1, edge_values=ids,
                                   values_out=torch.empty(16, dtype=torch.long))
    indptr, indices = _tiny_csc(torch.int64)
    weights = torch.rand(indices.numel(), dtype=torch.float64)
    edge_time = torch.arange(indices.numel(), dtype=torch.long)
    seed_time = torch.full((seeds.numel(),), 40, dtype=torch.long)
    for replace in (False, True):
        kernels.sample_one_hop(indptr, indices, seeds, 2, replace, 2, weights=weights)
        for strategy in ("uniform", "last"):
            kernels.sample_one_hop(indptr, indices, seeds, 2, replace, 3, edge_time=edge_time,
                                   seed_time=seed_time, temporal_strategy=strategy)


def _labor_kernels() -> None:
    """LABOR for int64 and int32 ``indices`` and edge id tables, int32 source keys (and
    int64, for graphs past 2^31 nodes), uniform and weighted."""
    seeds = torch.tensor([0, 1, 2, 2])
    for dtype in (torch.int64, torch.int32):
        indptr, indices = _tiny_csc(dtype)
        for id_dtype in (torch.int64, torch.int32):
            ids = torch.arange(indices.numel(), dtype=id_dtype)
            labor.sample_labor_hop(indptr, indices, indices.to(torch.int32), seeds, 3, 1,
                                   edge_ids=ids, edge_values=True)
    indptr, indices = _tiny_csc(torch.int64)
    weights = torch.rand(indices.numel(), dtype=torch.float64)
    for keys in (indices.to(torch.int32), indices):
        labor.sample_labor_hop(indptr, indices, keys, seeds, 40, 1, weights=weights,
                               edge_ids=torch.arange(indices.numel()), edge_values=True)


def _feature_kernels() -> None:
    """Owner grouping, and row copies of every word width rows are copied in
    (int64, int32, and bytes for rows whose size is not a multiple of 4), and int32 ids
    into int64 rows."""
    routing.split_by_owner(torch.tensor([4, 0, 5, 1]), [0, 3, 6])
    rows = torch.tensor([2, 0])
    for dtype, width in ((torch.int64, 1), (torch.float32, 1), (torch.uint8, 3)):
        out = torch.zeros(3, width, dtype=dtype)
        src = torch.ones(2, width, dtype=dtype)
        row_copy.place(out, rows, src, None)
        row_copy.place(out, (1, 3), src, torch.tensor([1, 0]))
    ids = torch.ones(2, dtype=torch.int32)  # an int32 id column, widened as it is copied
    row_copy.place(torch.zeros(3, dtype=torch.long), rows, ids, None)
    row_copy.place(torch.zeros(3, dtype=torch.long), (1, 3), ids, torch.tensor([1, 0]))


def _index_kernels() -> None:
    """Insert (with growth) and lookup of the node index used to dedupe and relabel, and
    the merge of one hop's runs of edges."""
    index = NodeIndex(2)
    index.insert(torch.arange(40))
    index.lookup(torch.tensor([3, 100]))
    runs = seed_runs([torch.tensor([2, 0]), torch.tensor([1])], [torch.tensor([1, 0]),
                                                               torch.tensor([2])])
    take_runs(torch.arange(3), runs)  # merging one hop's pieces of several partitions
