"""check_hop_response: a peer's hop response is checked against its request."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from pyg_dist.sampler._checks import RemoteResponseError, check_hop_response
from pyg_dist.sampler._types import HopRequest, HopResponse

AB, BA = ("a", "to", "b"), ("b", "to", "a")
NUM_NODES = {"a": 10, "b": 20}
NUM_EDGES = {AB: 100, BA: 50}
PEER = "worker trainers-1 (rank 1, partition 1)"


def _request():
    return HopRequest([AB, BA], [torch.tensor([0, 1, 2]), torch.tensor([5])], [2, -1],
                      [None, None], False, "uniform", None, None, 0)


def _response():
    return HopResponse(counts=[torch.tensor([2, 0, 1]), torch.tensor([4])],
                       nbrs=[torch.tensor([0, 9, 3]), torch.tensor([0, 1, 19, 2])],
                       eids=[torch.tensor([0, 1, 99]), torch.tensor([0, 10, 20, 49])])


def test_a_good_response_passes():
    check_hop_response(_request(), _response(), NUM_NODES, PEER, num_edges=NUM_EDGES)
    empty = HopResponse([torch.zeros(3, dtype=torch.long), torch.zeros(1, dtype=torch.long)],
                        [torch.empty(0, dtype=torch.long)] * 2,
                        [torch.empty(0, dtype=torch.long)] * 2)
    check_hop_response(_request(), empty, NUM_NODES, PEER)


def _edit(name, i, value):
    def fn(resp):
        getattr(resp, name)[i] = value
        return resp
    return fn


BAD = {
    "not a HopResponse": (lambda r: {"counts": r.counts}, "expected a HopResponse"),
    "one entry missing": (lambda r: HopResponse(r.counts[:1], r.nbrs[:1], r.eids[:1]),
                          "must hold 2 entries"),
    "counts as int32": (_edit("counts", 0, torch.tensor([2, 0, 1], dtype=torch.int32)),
                        "'counts' must be a 1-D int64"),
    "nbrs 2-D": (_edit("nbrs", 0, torch.tensor([[0, 9, 3]])), "'nbrs' must be a 1-D int64"),
    "eids a list": (_edit("eids", 0, [0, 1, 99]), "'eids' must be a 1-D int64"),
    "counts per seed": (_edit("counts", 0, torch.tensor([2, 1])), "2 counts for 3 seeds"),
    "negative count": (_edit("counts", 0, torch.tensor([4, -2, 1])), r"counts must lie in"),
    "count above fan-out": (_edit("counts", 0, torch.tensor([3, 0, 0])), r"in \[0, 2\]"),
    "sum differs": (_edit("counts", 0, torch.tensor([2, 0, 0])), "counts sum to 2"),
    "eids short": (_edit("eids", 1, torch.tensor([0, 1, 2])), "3 edge ids"),
    "neighbour too large": (_edit("nbrs", 0, torch.tensor([0, 10, 3])),
                            r"neighbour ids must lie in \[0, 10\)"),
    "negative neighbour": (_edit("nbrs", 1, torch.tensor([0, -1, 2, 3])), "neighbour ids"),
    "edge id too large": (_edit("eids", 1, torch.tensor([0, 1, 2, 50])),
                          r"edge ids must lie in \[0, 50\)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_hop_responses_raise_naming_the_peer(case):
    edit, match = BAD[case]
    with pytest.raises(RemoteResponseError, match=match) as info:
        check_hop_response(_request(), edit(_response()), NUM_NODES, PEER, num_edges=NUM_EDGES)
    assert PEER in str(info.value) and "sampler.hop" in str(info.value)


def _asking_ids():
    req = _request()
    req.original_eids = True
    return req


def _with_ids(resp):
    resp.original_eids = [torch.tensor([7, 3, 98]), torch.tensor([49, 1, 2, 0])]
    return resp


BAD_IDS = {
    "none sent": (lambda r: r, "'original_eids' must hold 2 entries"),
    "one short": (lambda r: _edit("original_eids", 0, torch.tensor([7, 3]))(_with_ids(r)),
                  "2 original edge ids for 3 edges"),
    "as int32": (lambda r: _edit("original_eids", 1, torch.tensor([1, 2, 3, 4],
                                                                  dtype=torch.int32))(_with_ids(r)),
                 "'original_eids' must be a 1-D int64"),
    "out of range": (lambda r: _edit("original_eids", 1, torch.tensor([0, 1, 2, 50]))(_with_ids(r)),
                     r"original edge ids must lie in \[0, 50\)"),
}


def test_original_edge_ids_are_checked_only_when_asked_for():
    check_hop_response(_asking_ids(), _with_ids(_response()), NUM_NODES, PEER,
                       num_edges=NUM_EDGES)
    check_hop_response(_request(), _response(), NUM_NODES, PEER, num_edges=NUM_EDGES)


@pytest.mark.parametrize("case", list(BAD_IDS))
def test_bad_original_edge_ids_raise_naming_the_peer(case):
    edit, match = BAD_IDS[case]
    with pytest.raises(RemoteResponseError, match=match) as info:
        check_hop_response(_asking_ids(), edit(_response()), NUM_NODES, PEER,
                           num_edges=NUM_EDGES)
    assert PEER in str(info.value)


@pytest.mark.multiprocess
def test_much_wider_remote_rows_do_not_crash_the_process():
    """Rows 13000 times wider than the local schema (a peer serving another graph):
    before the checks, the row copy wrote megabytes past the output (SIGSEGV). Run in
    a child so a regression fails this test instead of killing the test run."""
    script = textwrap.dedent("""
        import sys, tempfile, pathlib, asyncio, torch
        sys.path.insert(0, sys.argv[1])
        from sampler_helpers import small_hetero, load_parted
        from pyg_dist import Partitioner
        from pyg_dist.sampler._checks import RemoteResponseError
        from pyg_dist.sampler._features import FeatureFetcher
        root = pathlib.Path(tempfile.mkdtemp()) / "out"
        Partitioner(small_hetero(), 2, root, method="random", progress=False).generate()
        parted = load_parted(root, 2)
        def tamper(rank, request, response):
            x = response.nodes["a"]["x"]
            response.nodes["a"]["x"] = torch.zeros(x.size(0), 1 << 16)
            return response
        fetcher = FeatureFetcher(parted.group(0, tamper), parted.samplers[0], parted.meta)
        ids = torch.randperm(150, generator=torch.Generator().manual_seed(0))
        try:
            asyncio.run(fetcher.fetch({"a": ids}, {}))
        except RemoteResponseError as exc:
            print("REFUSED:", exc)
    """)
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-c", script, str(here)], capture_output=True,
                          text=True, timeout=240, cwd=here.parents[1])
    assert done.returncode == 0, f"child died with {done.returncode}:\n{done.stderr[-3000:]}"
    assert "REFUSED:" in done.stdout and "expected torch.float32 of shape" in done.stdout, \
        done.stdout


def test_the_hop_callee_refuses_malformed_requests(hetero_parted):
    """What a peer asks is checked too: list lengths, seed dtype and ownership."""
    sampler, meta = hetero_parted.samplers[0], hetero_parted.meta
    et = meta.edge_types[0]
    own = torch.arange(meta.node_book(et[2]).start(0), meta.node_book(et[2]).start(0) + 3)

    def request(seeds, fanouts):
        return HopRequest([et], seeds, fanouts, [None] * len(seeds), False, "uniform",
                          None, None, 0)

    good = sampler.hop(request([own], [2]))
    check_hop_response(request([own], [2]), good, meta.num_nodes, PEER,
                       num_edges=meta.num_edges)
    with pytest.raises(ValueError, match="malformed hop request"):
        sampler.hop(request([own, own], [2]))
    with pytest.raises(ValueError, match="malformed hop request"):
        sampler.hop(request([own], []))
    with pytest.raises(ValueError, match="seeds must be a 1-D integer"):
        sampler.hop(request([own.double()], [2]))
    with pytest.raises(ValueError, match="does not own"):
        sampler.hop(request([own + 10**6], [2]))


def test_the_owner_sends_each_sampled_edge_s_original_id(homo_parted):
    """With ``original_eids``, the hop's owner reads every sampled edge's original id at
    the position it drew: equal to the edge's ``oid`` (its id in the unpartitioned
    graph), with and without replacement; not asked, none is sent."""
    meta = homo_parted.meta
    et = meta.edge_types[0]
    oid = homo_parted.full("edges", et, "oid").view(-1)
    for part, sampler in enumerate(homo_parted.samplers):
        book = meta.node_book(et[2])
        seeds = torch.arange(book.start(part), book.start(part) + book.size(part))
        for replace in (False, True):
            req = HopRequest([et], [seeds], [4], [None], replace, "uniform", None, None, 7,
                             original_eids=True)
            resp = sampler.hop(req)
            check_hop_response(req, resp, meta.num_nodes, PEER, num_edges=meta.num_edges)
            assert resp.eids[0].numel() > 0
            assert torch.equal(resp.original_eids[0], oid[resp.eids[0]])
        req.original_eids = False
        assert sampler.hop(req).original_eids == []


def test_rows_read_directly_must_fit_the_output_naming_the_partition():
    """A same-machine partition's rows are copied straight into the output: another
    dtype or row shape in its files is refused naming its owner (int32 original ids
    widen into int64; no other attribute widens)."""
    from pyg_dist.sampler._checks import check_direct_rows

    out = torch.empty(4, 3)
    peer = "worker w1 (rank 1, partition 1)"
    check_direct_rows(torch.zeros(10, 3), out, peer, "paper", "x")
    check_direct_rows(torch.zeros(10, dtype=torch.int32), torch.empty(4, dtype=torch.long),
                      peer, "paper", "__original_id__", ids=True)
    bad = [(torch.zeros(10, 4), out), (torch.zeros(10, 3, dtype=torch.float64), out),
           (torch.zeros(10), out), (torch.zeros(10, dtype=torch.int32),
                                    torch.empty(4, dtype=torch.long))]
    for column, into in bad:
        with pytest.raises(RemoteResponseError, match=r"rank 1, partition 1.*'paper'.*'x'"):
            check_direct_rows(column, into, peer, "paper", "x")
