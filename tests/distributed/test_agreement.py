"""What must match across ranks is agreed once, and a mismatch fails every rank.

Each job returns, per rank, the message of the error that rank raised (or ``None``),
so the parent can check that *every* rank failed with the same message naming the
rank and the field, instead of one rank training on wrong data while another waits.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import torch
import torch.distributed as dist

from pyg_dist import (DisagreementError, DistContext, DistNeighborLoader, LocalFeatureStore,
                      LocalGraphStore, Partitioner, node_split, shutdown_rpc)
from pyg_dist.testing import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here starts processes

TIMEOUT_S = 20


@pytest.fixture(scope="module")
def two_partitionings(cora, tmp_path_factory) -> Dict[int, Path]:
    """Cora in 2 METIS parts, twice, with different seeds: same graph, other assignment."""
    roots = {}
    for seed in (0, 1):
        roots[seed] = tmp_path_factory.mktemp(f"cora_seed{seed}")
        Partitioner(cora, 2, roots[seed], seed=seed, progress=False, overwrite=True).generate()
    return roots


def _loader_errors(roots: List[str], cases: List[Tuple[Dict, Dict, Optional[int]]]
                   ) -> List[Optional[str]]:
    """Rank r opens ``roots[r]``; for each case ``(options of rank 0, options of rank 1,
    seeds of rank 1)`` it builds a loader and iterates an epoch. Returns, per case, the
    error message this rank raised or None. A refused loader leaves nothing behind, so
    the ranks go on with the next case."""
    ctx = DistContext.from_env(rpc_timeout=TIMEOUT_S)
    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    data = (LocalFeatureStore.from_partition(roots[ctx.rank], ctx.rank),
            LocalGraphStore.from_partition(roots[ctx.rank], ctx.rank))
    out: List[Optional[str]] = []
    try:
        for case in cases:
            ids = node_split(data, "train", ctx)
            if ctx.rank == 1 and case[2] is not None:
                ids = ids[:case[2]]
            try:
                loader = DistNeighborLoader(data=data, num_neighbors=[5, 5], input_nodes=ids,
                                            batch_size=16, current_ctx=ctx, **case[ctx.rank])
                for _ in loader:  # like DDP's gradient all-reduce
                    dist.all_reduce(torch.ones(1))
                loader.close()
                out.append(None)
            except Exception as exc:  # the message is what the test checks
                out.append(f"{type(exc).__name__}: {exc}")
        return out
    finally:
        shutdown_rpc(graceful=False)


def _same_error_everywhere(errors: List[Optional[str]], *needles: str) -> str:
    assert all(e is not None for e in errors), f"a rank did not fail: {errors}"
    for needle in needles:
        assert all(needle in e for e in errors), (needle, errors)
    return errors[0]


@pytest.mark.timeout(120)
def test_ranks_on_different_partitionings_refuse_to_run(two_partitionings):
    roots = [str(two_partitionings[0]), str(two_partitionings[1])]
    errors = [e[0] for e in run_ranks(_loader_errors, 2, roots, [({}, {}, None)], timeout=90)]
    _same_error_everywhere(errors, DisagreementError.__name__,
                           "partitioning (META.json uid)", "rank 0", "rank 1")
    assert len(set(errors)) == 1, errors


CASES = {  # name: (options of rank 0, options of rank 1, seeds of rank 1)
    "num_workers": ({"num_workers": 1}, {"num_workers": 0}, None),
    "sampling options": ({"replace": True}, {}, None),
    "even_batches": ({"even_batches": False}, {}, None),
    "no seeds": ({}, {}, 0),
    "bad argument": ({}, {"temporal_strategy": "newest"}, None),
    "fine": ({"shuffle": True}, {}, None),
}


@pytest.mark.timeout(150)
def test_loader_construction_is_agreed_by_every_rank(two_partitionings):
    roots = [str(two_partitionings[0])] * 2
    per_rank = run_ranks(_loader_errors, 2, roots, list(CASES.values()), timeout=120)
    errors = {name: [r[i] for r in per_rank] for i, name in enumerate(CASES)}
    for field in ("num_workers", "sampling options", "even_batches"):  # must match
        _same_error_everywhere(errors[field], "ranks disagree on " + field, "rank 0", "rank 1")
        assert len(set(errors[field])) == 1, errors[field]
    # a rank without seeds fails every rank when the loader is built, not mid-epoch
    _same_error_everywhere(errors["no seeds"], "rank(s) [1] have no seeds")
    # a bad argument on one rank: its own error there, named on the others
    bad = errors["bad argument"]
    assert bad[1] is not None and "temporal_strategy" in bad[1], bad
    assert bad[0] is not None and "rank 1" in bad[0] and "temporal_strategy" in bad[0], bad
    assert errors["fine"] == [None, None], errors["fine"]  # and the job goes on


def _two_loaders_in_order(root: str, swap: bool) -> Optional[str]:
    """Ranks build two loaders each; with ``swap`` rank 1 builds them in the other order."""
    ctx = DistContext.from_env(rpc_timeout=TIMEOUT_S)
    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    data = (LocalFeatureStore.from_partition(root, ctx.rank),
            LocalGraphStore.from_partition(root, ctx.rank))
    kinds = [("train", [5, 5]), ("val", [-1])]
    if swap and ctx.rank == 1:
        kinds.reverse()
    try:
        loaders = [DistNeighborLoader(data=data, num_neighbors=fanout, batch_size=64,
                                      input_nodes=node_split(data, split, ctx), current_ctx=ctx,
                                      even_batches=False) for split, fanout in kinds]
        names = [lo._worker_spec(0).group for lo in loaders]
        for loader in loaders:
            loader.close()
        return ",".join(names)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutdown_rpc(graceful=False)


@pytest.mark.timeout(120)
def test_loader_numbers_are_agreed_not_counted_per_process(two_partitionings):
    root = str(two_partitionings[0])
    same = run_ranks(_two_loaders_in_order, 2, root, False, timeout=90)
    assert same[0] == same[1] and same[0].endswith("_loader1w0"), same
    swapped = run_ranks(_two_loaders_in_order, 2, root, True, timeout=90)
    _same_error_everywhere(swapped, "ranks disagree on sampling options")


@pytest.mark.timeout(120)
def test_a_time_attr_that_is_not_a_time_is_refused_on_every_rank(two_partitionings):
    """Cora's ``x`` is a float feature matrix: every rank refuses it at construction
    with the same message (it was accepted on one rank and a KeyError on two)."""
    roots = [str(two_partitionings[0])] * 2
    errors = [e[0] for e in run_ranks(_loader_errors, 2, roots,
                                      [({"time_attr": "x"}, {"time_attr": "x"}, None)],
                                      timeout=90)]
    _same_error_everywhere(errors, "ValueError: time_attr='x' must hold one integer time")
    assert len(set(errors)) == 1, errors
