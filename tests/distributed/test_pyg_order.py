"""Full fan-outs on 2 and 3 partitions give exactly single-machine PyG's sample.

Single-machine ground truth is PyG's own ``NeighborSampler`` over the unpartitioned
graph (on pyg-lib's sampling ops as :mod:`tests.support.pyg_lib_reference` implements
them): every sampled node in the position PyG gives it (seeds first, then per hop the
neighbours of the frontier's nodes in frontier order, each node's in-edges in edge id
order), and the edges in the same order, in original ids. Also when the sampler is
driven by hand as PyG's own sampler tests drive it (built before RPC, PyG's
``init_rpc``, ``ConcurrentEventLoop``, ``node_sample`` / ``edge_sample``).
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import EdgeSamplerInput, NeighborSampler, NodeSamplerInput
from torch_geometric.sampler.neighbor_sampler import node_sample

from pyg_dist import (DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore,
                      Partitioner, init_rpc)
from pyg_dist.event_loop import ConcurrentEventLoop
from pyg_dist.format import _partition_io as io
from pyg_dist.rpc import shutdown_rpc
from pyg_dist.testing import free_port, run_ranks
from tests.support.pyg_lib_reference import reference_ops

pytestmark = pytest.mark.multiprocess

SEEDS = [[4, 9], [1, 6, 22], [17, 3]]  # per rank; any owner
NUM_NODES = 24
PAPER_SEEDS = [[2, 7], [11, 0, 5], [9]]


def _homo_graph() -> Data:
    """Every node has 0-3 in-edges, listed in an order unrelated to their ids."""
    g = torch.Generator().manual_seed(3)
    dst = torch.arange(NUM_NODES).repeat_interleave(torch.randint(0, 4, (NUM_NODES,),
                                                                  generator=g))
    src = torch.randint(0, NUM_NODES, (dst.numel(),), generator=g)
    perm = torch.randperm(dst.numel(), generator=g)
    return Data(edge_index=torch.stack([src, dst])[:, perm], num_nodes=NUM_NODES,
                x=torch.arange(NUM_NODES, dtype=torch.float).view(-1, 1))


def _hetero_graph() -> HeteroData:
    """Two edge types into ``paper``, one into ``author`` (edge types listed in sorted
    order, the order the reference op visits them in)."""
    g = torch.Generator().manual_seed(5)
    data = HeteroData()
    data["author"].x = torch.zeros(10, 1)
    data["paper"].x = torch.zeros(14, 1)
    for (src, rel, dst), n in ((("author", "writes", "paper"), 20),
                               (("paper", "cites", "paper"), 30),
                               (("paper", "to", "author"), 15)):
        data[src, rel, dst].edge_index = torch.stack([
            torch.randint(0, data[src].num_nodes, (n,), generator=g),
            torch.randint(0, data[dst].num_nodes, (n,), generator=g)])
    return data


WRITES = ("author", "writes", "paper")
# (authors, papers) per rank: edges of the graph, so each endpoint's subtree reaches the other
LINKS = [([1, 4], [3, 1]), ([7, 0, 9], [0, 7, 10]), ([3, 2], [5, 10])]


def _job(root: str, seeds: List, node_type, disjoint: bool,
         time_attr: Optional[str] = None) -> Dict:
    ctx = DistContext.from_env(rpc_timeout=20)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    data = (LocalFeatureStore.from_partition(root, pid),
            LocalGraphStore.from_partition(root, pid))
    try:
        sampler = DistNeighborSampler(data, num_neighbors=[-1, -1], current_ctx=ctx,
                                      disjoint=disjoint, time_attr=time_attr)
        out = sampler.sample_from_edges(_link_input(seeds[ctx.rank])) \
            if node_type == WRITES else sampler.sample_from_nodes(NodeSamplerInput(
                None, torch.tensor(seeds[ctx.rank]), input_type=node_type))
        return {k: getattr(out, k) for k in ("node", "row", "col", "edge", "batch",
                                             "num_sampled_nodes", "num_sampled_edges")}
    finally:
        shutdown_rpc()


def _link_input(seeds, edge_type=WRITES) -> EdgeSamplerInput:
    return EdgeSamplerInput(None, torch.tensor(seeds[0]), torch.tensor(seeds[1]),
                            input_type=edge_type)


def _inputs(seeds: List, node_type):
    """The sampler input of one rank's seeds: edges for :data:`WRITES`, else nodes."""
    if node_type == WRITES:
        return _link_input(seeds)
    return NodeSamplerInput(None, torch.tensor(seeds), input_type=node_type)


def _reference(data, inputs, disjoint: bool, **kwargs):
    with reference_ops():
        sampler = NeighborSampler(data, num_neighbors=[-1, -1], disjoint=disjoint, **kwargs)
        out = sampler.sample_from_edges(inputs) if isinstance(inputs, EdgeSamplerInput) \
            else node_sample(inputs, sampler._sample)
    perm = sampler.edge_permutation  # CSC positions -> edge ids, as PyG's loaders map them
    if isinstance(out.edge, dict):
        out.edge = {t: e if perm.get(t) is None else perm[t][e] for t, e in out.edge.items()}
    elif perm is not None:
        out.edge = perm[out.edge]
    return out


def _check(data, got: Dict, inputs, disjoint: bool, **kwargs) -> None:
    want = _reference(data, inputs, disjoint, **kwargs)
    for key in ("node", "row", "col", "edge", "batch"):
        a, b = got[key], getattr(want, key)
        if isinstance(b, dict):
            assert set(a) == set(b), key
            for t in b:
                assert torch.equal(a[t], b[t]), (key, t, a[t].tolist(), b[t].tolist())
        elif b is not None or a is not None:
            assert torch.equal(a, b), (key, a.tolist(), b.tolist())
    for key in ("num_sampled_nodes", "num_sampled_edges"):
        a, b = got[key], getattr(want, key)
        if isinstance(b, dict):
            b = {t: list(v) for t, v in b.items() if any(v) or t in a}
            a = {t: list(v) for t, v in a.items() if any(v) or t in b}
        assert a == b, (key, a, b)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    out = {}
    timed = _hetero_graph()
    for t, n in (("author", 10), ("paper", 14)):  # a node's time: its id's last digit
        timed[t].time = torch.arange(n) % 10
    for name, data in (("homo", _homo_graph()), ("hetero", _hetero_graph()),
                       ("timed", timed)):
        for n in (2, 3):
            root = tmp_path_factory.mktemp(f"{name}{n}")
            Partitioner(data, n, root, method="random", seed=1, overwrite=True,
                        progress=False).generate()
            out[name, n] = (data, root)
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("num_parts", [2, 3])
def test_full_fanout_order_is_single_machine_pygs_homo(parts, num_parts, disjoint):
    data, root = parts["homo", num_parts]
    seeds = SEEDS[:num_parts]
    results = run_ranks(_job, num_parts, str(root), seeds, None, disjoint, timeout=150)
    for rank, got in enumerate(results):
        _check(data, got, _inputs(seeds[rank], None), disjoint)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("num_parts", [2, 3])
def test_full_fanout_order_is_single_machine_pygs_hetero(parts, num_parts, disjoint):
    data, root = parts["hetero", num_parts]
    seeds = PAPER_SEEDS[:num_parts]
    results = run_ranks(_job, num_parts, str(root), seeds, "paper", disjoint, timeout=150)
    for rank, got in enumerate(results):
        _check(data, got, _inputs(seeds[rank], "paper"), disjoint)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts", [2, 3])
def test_disjoint_link_subtrees_are_pygs_hetero(parts, num_parts):
    """PyG's disjoint link sampling gives the source and the destination of a seed edge
    subtrees of their own while sampling (merged by ``batch % num_pos`` after): a
    seed endpoint reached again inside the other endpoint's subtree is added again."""
    data, root = parts["hetero", num_parts]
    seeds = LINKS[:num_parts]
    results = run_ranks(_job, num_parts, str(root), seeds, WRITES, True, timeout=150)
    for rank, got in enumerate(results):
        _check(data, got, _inputs(seeds[rank], WRITES), True)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_parts", [2, 3])
def test_temporal_link_endpoints_are_bounded_by_their_own_time(parts, num_parts):
    """Without edge label times, PyG bounds each endpoint's subtree by that endpoint's
    own node time, not one time for both."""
    data, root = parts["timed", num_parts]
    seeds = LINKS[:num_parts]
    results = run_ranks(_job, num_parts, str(root), seeds, WRITES, True, "time", timeout=150)
    for rank, got in enumerate(results):
        _check(data, got, _inputs(seeds[rank], WRITES), True, time_attr="time")


def _fields(out) -> Dict:
    return {k: getattr(out, k) for k in ("node", "row", "col", "edge", "batch",
                                         "num_sampled_nodes", "num_sampled_edges")}


def _driven_job(root: str, node_inputs: List, link_inputs: List, disjoint: bool,
                port: int) -> List[Dict]:
    """PyG's sampler tests' sequence: the sampler is built before RPC, which PyG's
    ``init_rpc(current_ctx, master_addr, master_port)`` joins; then sampled through a
    ``ConcurrentEventLoop``."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    node_input, link_input = node_inputs[rank], link_inputs[rank]
    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world,
                      group_name="dist-sampler-test", rpc_timeout=20)
    data = (LocalFeatureStore.from_partition(root, rank),
            LocalGraphStore.from_partition(root, rank))
    sampler = DistNeighborSampler(data=data, current_ctx=ctx, num_neighbors=[-1, -1],
                                  disjoint=disjoint)
    try:
        init_rpc(current_ctx=ctx, master_addr="localhost", master_port=port)
        sampler.init_sampler_instance()
        sampler.register_sampler_rpc()
        sampler.event_loop = ConcurrentEventLoop(2)
        sampler.event_loop.start_loop()
        nodes = sampler.event_loop.run_task(coro=sampler.node_sample(node_input))
        num_nodes = sum(sampler.meta.num_nodes.values())
        links = sampler.event_loop.run_task(coro=sampler.edge_sample(
            link_input, sampler.node_sample, num_nodes, disjoint))
        again = sampler.sample_from_edges(link_input)  # the blocking form: the same sample
        assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
                   for a, b in zip(_fields(links).values(), _fields(again).values())
                   if not isinstance(a, dict))
        return [_fields(nodes), _fields(links)]
    finally:
        if sampler.event_loop is not None:
            sampler.event_loop.close()
        shutdown_rpc()


# per rank: (node seeds, link seeds) of the homogeneous graph (any owner)
HOMO_DRIVEN = [([4, 9], ([1, 6], [2, 7])), ([1, 6, 22], ([4, 9, 0], [5, 0, 13])),
               ([17, 3], ([20], [8]))]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("graph", ["homo", "hetero"])
@pytest.mark.parametrize("num_parts", [2, 3])
def test_driven_by_hand_as_pygs_tests_drive_it(parts, num_parts, graph):
    """Built before RPC (no join at construction), PyG's ``init_rpc`` (as PyG's own
    spawned processes: no torchrun environment), then
    ``init_sampler_instance``, ``register_sampler_rpc``, a ``ConcurrentEventLoop`` and
    ``node_sample`` / ``edge_sample``: single-machine PyG's sample, in original ids."""
    data, root = parts[graph, num_parts]
    if graph == "homo":
        node_in = [_inputs(HOMO_DRIVEN[r][0], None) for r in range(num_parts)]
        link_in = [_link_input(HOMO_DRIVEN[r][1], None) for r in range(num_parts)]
    else:
        node_in = [_inputs(PAPER_SEEDS[r], "paper") for r in range(num_parts)]
        link_in = [_inputs(LINKS[r], WRITES) for r in range(num_parts)]
    disjoint = graph == "hetero"
    unset = {"MASTER_ADDR": None, "MASTER_PORT": None, "TORCHELASTIC_USE_AGENT_STORE": None}
    with socket.socket() as default:  # torch's default port is taken: the ranks meet
        try:                          # where PyG's init_rpc tells them to, or nowhere
            default.bind(("127.0.0.1", 29500))
            default.listen()
        except OSError:
            pass  # taken already by something else
        results = run_ranks(_driven_job, num_parts, str(root), node_in, link_in, disjoint,
                            free_port(), timeout=150,
                            rank_env={r: unset for r in range(num_parts)})
    for rank, (nodes, links) in enumerate(results):
        _check(data, nodes, node_in[rank], disjoint)
        _check(data, links, link_in[rank], disjoint)
