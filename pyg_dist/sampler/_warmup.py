"""Compiling (or loading from numba's on-disk cache) every kernel before it is needed.

numba compiles a kernel on its first call for each new combination of argument
types. On a fresh clone that takes seconds per kernel, and a process that compiles
while serving its first RPC can make a waiting peer time out. :func:`warm_up` calls
every kernel used during training and serving on tiny inputs, through the same
wrappers and with exactly the argument types used at run time, so no later call
compiles again. Call it before joining RPC; it is idempotent and free the second
time in a process.

LABOR's kernels are warmed only when asked (``labor=True``, or :func:`warm_up_for` a
job sampling with ``sampling_strategy="labor"``): a job that never samples with LABOR
never compiles them. A LABOR job warms them in every process that samples or serves
for it before it joins RPC (or, with RPC joined, before the loaders' agreement), so no
peer's LABOR request waits on a compiler.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Set

import numpy as np
import torch

from pyg_dist.format._meta import PartitionMeta
from pyg_dist.rpc import _routing as routing
from pyg_dist.sampler import _sample_kernels as kernels, _labor as labor_hop, _gather as row_copy
from pyg_dist.sampler import _joint_hop as joint
from pyg_dist.sampler._edge_columns import repeat_into
from pyg_dist.sampler._node_index import NodeIndex
from pyg_dist.sampler._runs import seed_runs, take_runs

__all__ = ["warm_up", "warm_up_for"]

_LOCK = threading.Lock()
_DONE: Set[str] = set()  # the parts of PARTS this process has warmed


def warm_up(labor: bool = False, wide_keys: bool = False) -> float:
    """Compiles or loads the numba kernels of sampling, serving and feature fetching.

    Args:
        labor (bool): LABOR's kernels too (``sampling_strategy="labor"``), for int32
            source keys.
        wide_keys (bool): with ``labor``, also for int64 source keys (a node type of at
            least 2^31 nodes, :func:`~pyg_dist.sampler._labor.key_dtype`).

    Returns:
        float: seconds spent (``0.0`` when this process already warmed all that).
    """
    wanted = ["neighbor"] + (["labor"] if labor else []) + \
        (["labor int64 keys"] if labor and wide_keys else [])
    with _LOCK:
        todo = [part for part in wanted if part not in _DONE]
        if not todo:
            return 0.0
        start = time.perf_counter()
        # the tiny inputs draw from torch's generator: the caller's stream (a seeded
        # model's initialisation) must not depend on whether kernels were warm already
        with torch.random.fork_rng(devices=[]):
            for part in todo:
                PARTS[part]()
                _DONE.add(part)
        return time.perf_counter() - start


def warm_up_for(sampling_strategy: str, meta: PartitionMeta) -> float:
    """:func:`warm_up` for a job sampling the graph ``meta`` describes with
    ``sampling_strategy`` (``"neighbor"`` or ``"labor"``): LABOR's kernels only for LABOR,
    with int64 source keys only where a node type needs them."""
    use = sampling_strategy == "labor"
    wide = any(labor_hop.key_dtype(n) == torch.int64 for n in meta.num_nodes.values())
    return warm_up(labor=use, wide_keys=use and wide)


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


def _joint_kernel() -> None:
    """The hop over several partitions read here (one signature whatever their dtypes)."""
    readers = [joint.Reader(p, *_tiny_csc(dtype), 82 * p, torch.arange(82, dtype=dtype), "")
               for p, dtype in enumerate((torch.int64, torch.int32))]
    tables = joint.JointTables(readers, torch.tensor([0, 3, 6]), 164, 2)
    joint.sample_joint(tables, torch.tensor([0, 4, 2, 5]), 3, False,
                       joint.stream_seeds(1, tables.parts, np.zeros(2, dtype=np.int64)), 5, 164,
                       ("n", "to", "n"))


def _labor_kernels(key_dtype: torch.dtype) -> None:
    """LABOR with ``key_dtype`` source keys, gathering from int64 and int32 ``indices``;
    int32 and int64 edge id tables, uniform and weighted rows share one kernel."""
    seeds = torch.tensor([0, 1, 2, 2])
    for dtype in (torch.int64, torch.int32):
        indptr, indices = _tiny_csc(dtype)
        weights = torch.rand(indices.numel(), dtype=torch.float64)
        for ids, w in ((torch.arange(indices.numel(), dtype=dtype), None),
                       (torch.arange(indices.numel()), weights)):
            labor_hop.sample_labor_hop(indptr, indices, indices.to(key_dtype), seeds, 40,
                                       1, weights=w, edge_ids=ids, edge_values=True)


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
    repeat_into(torch.tensor([3, 1]), torch.tensor([2, 0]))  # a hop's destination column
    index.lookup(torch.tensor([3, 100]))
    runs = seed_runs([torch.tensor([2, 0]), torch.tensor([1])], [torch.tensor([1, 0]),
                                                               torch.tensor([2])])
    take_runs(torch.arange(3), runs)  # merging one hop's pieces of several partitions
    seed_runs([torch.tensor([4, 0])], [torch.tensor([1, 2])])  # not a range: sorted


def _neighbor_parts() -> None:
    """Everything but LABOR: neighbour sampling, feature fetching, the node index."""
    _sampling_kernels()
    _joint_kernel()
    _feature_kernels()
    _index_kernels()


#: what :func:`warm_up` may warm, by name
PARTS: Dict[str, Callable[[], None]] = {
    "neighbor": _neighbor_parts,
    "labor": lambda: _labor_kernels(torch.int32),
    "labor int64 keys": lambda: _labor_kernels(torch.int64),
}
