"""FeatureFetcher in one process: request packing and splitting against ground truth,
and responses from a faulty peer rejected before a byte is copied."""
import asyncio

import numpy as np
import pytest
import torch
from sampler_helpers import small_hetero

from pyg_dist.sampler._checks import RemoteResponseError
from pyg_dist.sampler._features import FeatureFetcher
from pyg_dist.sampler._fetch_jobs import owner_shares
from pyg_dist.sampler._gather import place as _place

ORIGINAL = small_hetero()  # the unpartitioned graph (partitioned by the fixture)


def _fetch(fetcher, nodes, edges, unique=True):
    return asyncio.run(fetcher.fetch(nodes, edges, unique=unique))


def _random_ids(rng, total, size, repeats):
    if repeats:
        return torch.from_numpy(rng.integers(0, total, size))
    return torch.from_numpy(rng.permutation(total)[:min(size, total)])


def _request_bytes(fetcher, request):
    total = 0
    for kind in ("nodes", "edges"):
        for group, ids in getattr(request, kind).items():
            attrs = getattr(request, f"{kind[:-1]}_attrs")[group]
            total += ids.numel() * sum(
                fetcher.local.features.tensor(group, a)[0].numel()
                * fetcher.local.features.tensor(group, a).element_size() for a in attrs)
    return total


@pytest.mark.parametrize("max_rpc_bytes", [1, 64, 500, 8 << 20])
def test_fetch_matches_ground_truth_with_tiny_requests(hetero_parted, max_rpc_bytes):
    """Every node and edge type at once, ids from both partitions, repeated or not:
    the rows equal the unpartitioned truth however finely requests are split."""
    meta, rng = hetero_parted.meta, np.random.default_rng(max_rpc_bytes)
    for part in (0, 1):
        group = hetero_parted.group(part)
        fetcher = FeatureFetcher(group, hetero_parted.samplers[part], meta,
                                 max_rpc_bytes=max_rpc_bytes)
        for trial in range(12):
            repeats = trial % 2 == 0
            nodes = {t: _random_ids(rng, meta.num_nodes[t], int(rng.integers(0, 60)), repeats)
                     for t in meta.node_types}
            edges = {t: _random_ids(rng, meta.num_edges[t], int(rng.integers(0, 60)), repeats)
                     for t in meta.edge_types}
            group.calls.clear()
            got = _fetch(fetcher, nodes, edges, unique=repeats)
            for kind, ids_by in (("nodes", nodes), ("edges", edges)):
                for t, ids in ids_by.items():
                    orig = hetero_parted.full(kind, t, "nid" if kind == "nodes" else "oid")[ids]
                    for attr, value in getattr(got, kind)[t].items():
                        want = hetero_parted.full(kind, t, attr)[ids]
                        assert value.dtype == want.dtype and torch.equal(value, want), \
                            (kind, t, attr)
                        assert torch.equal(value, ORIGINAL[t][attr][orig]), (kind, t, attr)
            for rank, request in group.calls:
                assert rank != part
                size = _request_bytes(fetcher, request)
                rows = sum(i.numel() for d in (request.nodes, request.edges) for i in d.values())
                assert size <= max_rpc_bytes or rows <= len(meta.node_types) + len(meta.edge_types)
        if max_rpc_bytes <= 64:
            assert len(group.calls) > 2 * 4  # split into many pieces, not one per partition


def test_fetch_homo_many_random_sets(homo_parted):
    meta, rng = homo_parted.meta, np.random.default_rng(7)
    (node_type,), (edge_type,) = meta.node_types, meta.edge_types
    fetcher = FeatureFetcher(homo_parted.group(1), homo_parted.samplers[1], meta,
                             max_rpc_bytes=100)
    for size in list(range(0, 40, 3)) + [300, 1000]:
        ids = _random_ids(rng, meta.num_nodes[node_type], size, True)
        eids = _random_ids(rng, meta.num_edges[edge_type], size, True)
        got = _fetch(fetcher, {node_type: ids}, {edge_type: eids})
        for attr, value in got.nodes[node_type].items():
            assert torch.equal(value, homo_parted.full("nodes", node_type, attr)[ids])
        for attr, value in got.edges[edge_type].items():
            assert torch.equal(value, homo_parted.full("edges", edge_type, attr)[eids])


# ---- a faulty peer --------------------------------------------------------------------
def _both_parts(meta, node_type):
    """Ids from both partitions, shuffled (the remote rows scatter into the output)."""
    book = meta.node_book(node_type)
    ids = torch.cat([torch.arange(book.start(0), book.start(0) + 20),
                     torch.arange(book.start(1), book.start(1) + 20)])
    return ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))]


def _tampered(parted, node_type, edit):
    def tamper(rank, request, response):
        rows = response.nodes.get(node_type)
        if rows is not None:
            edit(rows)
        return response
    return FeatureFetcher(parted.group(0, tamper), parted.samplers[0], parted.meta)


def _set(attr, fn):
    def edit(rows):
        rows[attr] = fn(rows[attr])
    return edit


BAD_RESPONSES = {
    "wider rows": _set("x", lambda x: torch.cat([x, x], 1)),
    "much wider rows": _set("x", lambda x: torch.zeros(x.size(0), 1 << 16)),
    "wrong dtype, wider": _set("x", lambda x: x.double()),
    "wrong dtype, same width": _set("x", lambda x: x.view(torch.int32)),
    "one row short": _set("x", lambda x: x[:-1]),
    "one row too many": _set("x", lambda x: torch.cat([x, x[:1]])),
    "missing attribute": lambda rows: rows.pop("x"),
    "extra attribute": lambda rows: rows.update(z=rows["x"]),
    "not a tensor": _set("x", lambda x: x.tolist()),
    "rows of another shape": _set("x", lambda x: x.reshape(x.size(0), 1, -1)),
}


@pytest.mark.parametrize("case", list(BAD_RESPONSES))
def test_bad_remote_rows_raise_naming_the_peer(hetero_parted, case):
    fetcher = _tampered(hetero_parted, "a", BAD_RESPONSES[case])
    ids = _both_parts(hetero_parted.meta, "a")
    with pytest.raises(RemoteResponseError, match=r"fake worker \(rank 1, partition 1\)"):
        _fetch(fetcher, {"a": ids}, {})


def test_missing_or_extra_type_raises(hetero_parted):
    meta = hetero_parted.meta

    def drop(rank, request, response):
        response.nodes.pop("a")
        return response

    def extra(rank, request, response):
        response.edges[meta.edge_types[0]] = {}
        return response

    ids = _both_parts(meta, "a")
    for tamper, what in ((drop, "missing"), (extra, "unexpected")):
        fetcher = FeatureFetcher(hetero_parted.group(0, tamper), hetero_parted.samplers[0], meta)
        with pytest.raises(RemoteResponseError, match=what):
            _fetch(fetcher, {"a": ids}, {})


# ---- _place and owner grouping on bad input: errors, never out-of-bounds writes -------
def test_place_rejects_inputs_it_cannot_copy_safely():
    out = torch.zeros(4, 3)
    src = torch.arange(12, dtype=torch.float32).view(4, 3)
    _place(out, torch.tensor([3, 2, 1, 0]), src, None)
    assert torch.equal(out, src.flip(0))
    bad = [
        (out, torch.tensor([0, 1]), torch.zeros(2, 6), None, "row shape"),
        (out, torch.tensor([0, 1]), torch.zeros(2, 3, dtype=torch.int32), None, "dtype"),
        (out, torch.tensor([0, 4]), src[:2], None, "output rows"),
        (out, torch.tensor([-1, 0]), src[:2], None, "output rows"),
        (out, torch.tensor([0, 1]), src, torch.tensor([0, 4]), "source rows"),
        (out, torch.tensor([0, 1]), src, torch.tensor([-5, 0]), "source rows"),
        (out, torch.tensor([0, 1, 2]), src[:2], None, "rows"),
        (out, (3, 5), src[:2], None, "output rows"),
        (out, (2, 4), src, torch.tensor([0, 1, 2]), "rows"),
    ]
    for out_, rows, src_, src_rows, match in bad:
        with pytest.raises(ValueError, match=match):
            _place(out_, rows, src_, src_rows)


def test_place_trusts_rows_checked_once_only_within_the_bound_checked():
    """Several columns read at the same rows check them once (``src_rows_below``): a
    column shorter than that bound is still refused before anything is read."""
    src = torch.arange(12, dtype=torch.float32).view(4, 3)
    out = torch.zeros(2, 3)
    _place(out, (0, 2), src, torch.tensor([3, 1]), src_rows_below=4)
    assert torch.equal(out, src[[3, 1]])
    with pytest.raises(ValueError, match="checked below 5, but the source has 4 rows"):
        _place(out, (0, 2), src, torch.tensor([4, 1]), src_rows_below=5)


@pytest.mark.parametrize("src", [torch.arange(100, 160), torch.arange(60, dtype=torch.int32),
                                 torch.rand(60, 1), torch.rand(60, 5), torch.rand(60, 33),
                                 torch.rand(60, 40)[:, ::2], torch.rand(60, 64).bfloat16()])
def test_place_copies_rows_of_every_width_exactly(src):
    """One-word rows (ids, labels) take their own loop, rows of 64 bytes and more into
    a range torch's (from a strided source too): gathers and scatters equal indexing."""
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 60, (200,), generator=g)
    out = torch.full((210, *src.shape[1:]), -1).to(src.dtype)
    _place(out, (5, 205), src, rows)
    assert torch.equal(out[5:205], src[rows]) and (out[:5] == -1).all() and (out[205:] == -1).all()
    dst = torch.randperm(210, generator=g)[:200]
    out = torch.zeros(210, *src.shape[1:], dtype=src.dtype)
    _place(out, dst, src, rows)
    want = torch.zeros_like(out)
    want[dst] = src[rows]
    assert torch.equal(out, want)


def test_place_widens_int32_ids_into_int64_rows():
    """Id files store int32 where ids fit: the id column is widened as it is copied
    (gathered, scattered or whole), and only one-word rows widen."""
    src = torch.arange(2**31 - 60, 2**31, dtype=torch.int32)
    rows = torch.tensor([59, 0, 7, 7, 31])
    out = torch.full((7,), -1)
    _place(out, (1, 6), src, rows)
    assert out.dtype == torch.int64 and out.tolist() == [-1, *src[rows].tolist(), -1]
    out = torch.zeros(60, dtype=torch.int64)
    _place(out, torch.arange(59, -1, -1), src, None)
    assert torch.equal(out, src.flip(0).long())
    with pytest.raises(ValueError, match="dtype"):
        _place(torch.zeros(2, 2, dtype=torch.int64), (0, 2), torch.zeros(2, 2, dtype=torch.int32),
               None)
    with pytest.raises(ValueError, match="dtype"):  # never narrows
        _place(torch.zeros(2, dtype=torch.int32), (0, 2), torch.zeros(2, dtype=torch.int64), None)


def test_shares_reject_ids_outside_the_book(hetero_parted):
    book = hetero_parted.meta.node_book("a")
    for bad in (book.total, 10**12, -1):
        ids = torch.tensor([0, book.start(1), bad])
        with pytest.raises(ValueError, match="out of range"):
            owner_shares(ids, book)


@pytest.mark.parametrize("failure", ["dead peer", "bad response"])
def test_every_failed_request_is_retrieved(hetero_parted, failure):
    """Many requests in flight, all failing: the first failure is raised, and asyncio
    never logs 'Task exception was never retrieved' for the others."""
    import gc
    import logging

    logged = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    logging.getLogger("asyncio").addHandler(handler)
    error = RuntimeError("peer is gone") if failure == "dead peer" else None
    tamper = BAD_RESPONSES["wider rows"] if failure == "bad response" else None
    group = hetero_parted.group(
        0, (lambda rank, req, resp: (tamper(resp.nodes["a"]), resp)[1]) if tamper else None,
        error)
    fetcher = FeatureFetcher(group, hetero_parted.samplers[0], hetero_parted.meta,
                             max_rpc_bytes=64)
    try:
        with pytest.raises((RuntimeError, RemoteResponseError)):
            _fetch(fetcher, {"a": _both_parts(hetero_parted.meta, "a")}, {})
        assert len(group.calls) > 5
        gc.collect()
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
    assert logged == []
