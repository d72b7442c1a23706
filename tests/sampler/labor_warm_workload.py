"""Batches after the warm-up a loader's construction ran, and the numba signatures they
add (run by ``test_labor_warmup.py`` in a fresh interpreter).

Usage: ``python labor_warm_workload.py neighbor|labor``. ``neighbor``: a neighbour
loader is built and draws a batch. ``labor``: a LABOR loader is built, then LABOR
batches are drawn (uniform, weighted, ``layer_dependency``, all neighbours, through
loaders; heterogeneous on 2 partitions with int64 and int32 ``indices``, and an int64
edge id table, through the partitions' samplers). Prints one JSON line: ``labor``, the
signatures LABOR's dispatchers hold at the end; ``new``, the signatures of any
dispatcher of the library that appeared after the first loader was built.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Dict, Set

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler_helpers import load_parted, small_hetero  # noqa: E402
from warm_workload import signatures  # noqa: E402

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore,  # noqa: E402
                      LocalGraphStore, Partitioner)
from pyg_dist.datasets import community_graph  # noqa: E402
from pyg_dist.sampler._labor import sample_labor_hop, type_seed  # noqa: E402
from pyg_dist.testing import encode_ids  # noqa: E402

LABOR_MODULES = "pyg_dist.sampler._labor"  # every module of LABOR's kernels


def labor_signatures() -> Dict[str, Set[str]]:
    return {k: v for k, v in signatures().items() if k.startswith(LABOR_MODULES) and v}


def _loader(stores, ctx: DistContext, **kwargs) -> DistNeighborLoader:
    kwargs.setdefault("num_neighbors", [3, 2])
    return DistNeighborLoader(stores, input_nodes=torch.arange(0, 300, 7), batch_size=16,
                              seed=1, concurrency=1, current_ctx=ctx, **kwargs)


def _partition_samplers(root: Path) -> None:
    """Heterogeneous LABOR hops on both partitions, with int64 then int32 ``indices``."""
    Partitioner(small_hetero(), 2, root, method="random", progress=False).generate()
    parted = load_parted(root, 2)
    for narrow in (False, True):
        for part, sampler in enumerate(parted.samplers):
            for edge_type in parted.meta.edge_types:
                csc = sampler.graph.csc_by_type[edge_type]
                if narrow:
                    csc.indices = csc.indices.to(torch.int32)
                book = parted.meta.node_book(edge_type[2])
                seeds = torch.arange(book.start(part), book.start(part) + 5)
                for weight in (None, "w"):
                    sampler.sample_labor(edge_type, seeds, 3, 11, weight, original_eids=True)


def _wide_edge_ids(stores) -> None:
    """An int64 edge id table (id files hold int32 or int64)."""
    csc = next(iter(stores[1].csc_by_type.values()))
    ids = torch.arange(csc.indices.numel(), dtype=torch.int64)
    sample_labor_hop(csc.indptr, csc.indices, csc.indices.to(torch.int32),
                     torch.arange(5), 4, type_seed(3, "n"), edge_ids=ids, edge_values=True)


def main() -> None:
    mode = sys.argv[1]
    tmp = Path(tempfile.mkdtemp())
    data = encode_ids(community_graph(300, 5.0, 8, 3, seed=0))
    data.w = torch.rand(data.edge_index.size(1), generator=torch.Generator().manual_seed(0))
    Partitioner(data, 1, tmp / "homo", progress=False).generate()
    stores = (LocalFeatureStore.from_partition(tmp / "homo", 0),
              LocalGraphStore.from_partition(tmp / "homo", 0))
    ctx = DistContext(rank=0, world_size=1)
    first = _loader(stores, ctx, sampling_strategy=mode)
    before = signatures()
    next(iter(first))
    if mode == "labor":
        for kwargs in (dict(weight_attr="w"), dict(layer_dependency=True),
                       dict(num_neighbors=[-1, 40])):
            next(iter(_loader(stores, ctx, sampling_strategy="labor", **kwargs)))
        _partition_samplers(tmp / "hetero")
        _wide_edge_ids(stores)
    after = signatures()
    new = {k: sorted(v - before.get(k, set())) for k, v in after.items()
           if v - before.get(k, set())}
    print(json.dumps({"labor": {k: sorted(v) for k, v in labor_signatures().items()},
                      "new": new}))


if __name__ == "__main__":
    main()
