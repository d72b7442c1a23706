"""Stores built in memory with a partition book, made into the partitions they serve
(:mod:`pyg_dist.store._memory_partition`), in one process: every rank's plan is made
here and the exchange is the list of their infos."""
from __future__ import annotations

import pytest
import torch

from pyg_dist import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._memory_partition import build_partition, plan_partition

# PyG's test graph: two ranks, each holding edges whose destination the other owns
EDGES = torch.tensor([[1, 2, 3, 4, 5, 0, 5, 6, 7, 8, 9, 0],
                      [0, 1, 2, 3, 4, 4, 9, 5, 6, 7, 8, 9]])
HELD = [torch.tensor([0, 1, 2, 3, 4, 5, 11]), torch.tensor([4, 7, 8, 9, 10, 6, 11])]
BOOK = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
TIME = torch.tensor([5, 0, 1, 3, 3, 4, 4, 4, 4, 4])


def _stores(rank: int, with_ids: bool = True, book=BOOK, parts: int = 2):
    held = HELD[rank]
    node_id = torch.unique(EDGES[:, held])
    features = LocalFeatureStore.from_data(node_id, x=node_id.float().view(-1, 1) * 10)
    features.put_tensor(TIME, group_name=None, attr_name="time")  # every node's
    features.put_tensor(held * 100, group_name=None, attr_name="edge_time")  # per edge held
    graph = LocalGraphStore.from_data(held if with_ids else None, EDGES[:, held], 10,
                                      is_sorted=True)
    graph.node_pb = book
    graph.meta.update({"num_parts": parts})
    graph.num_partitions, graph.partition_idx = parts, rank
    return features, graph


def _build(with_ids: bool = True):
    plans = [plan_partition(*_stores(r, with_ids)) for r in (0, 1)]
    infos = [p.info() for p in plans]
    return [build_partition(p, infos) for p in plans]


@pytest.mark.parametrize("with_ids", [True, False])
def test_two_ranks_hold_the_union_graph_each_edge_once(with_ids: bool) -> None:
    built = _build(with_ids)
    assert built[0][1].meta.uid == built[1][1].meta.uid != ""
    union = set()
    for features, graph in built:
        src, dst, eid = graph.original_coo()
        assert bool((BOOK[dst] == graph.part).all())  # edges at their destination's owner
        union |= {(int(s), int(d)) for s, d in zip(src, dst)}
        if with_ids:
            assert torch.equal(EDGES[:, eid], torch.stack([src, dst]))
            assert torch.equal(features.get_tensor((None, None), "edge_time", index=eid),
                               eid * 100)
    assert union == {(int(s), int(d)) for s, d in EDGES.t()}
    eids = torch.cat([g.original_coo()[2] for _, g in built])
    assert sorted(eids.tolist()) == list(range(12))  # no ids put: positions, all distinct


def test_built_stores_answer_by_original_id_and_time_for_every_node() -> None:
    for features, graph in _build():
        owned = features.get_global_id(None)
        assert torch.equal(owned, torch.nonzero(BOOK == graph.part).view(-1))
        assert torch.equal(features.get_tensor(None, "x", index=owned), owned.view(-1, 1) * 10.)
        assert torch.equal(features.get_tensor(None, "time"), TIME)  # every node's
        assert torch.equal(features.get_tensor(None, "time", index=torch.tensor([9, 0])),
                           TIME[[9, 0]])
        halo = graph.halo["_N"]
        assert torch.equal(graph.halo_attrs["_N"]["time"],
                           TIME[graph.id_tables.to_original("node", "_N", halo)])


@pytest.mark.parametrize("change,message", [
    (lambda f, g: setattr(g, "node_pb", None), "need a partition book"),
    (lambda f, g: setattr(g, "node_pb", BOOK[:-1]), "node_pb has 9 entries"),
    (lambda f, g: setattr(g, "node_pb", BOOK.float()), "1-D integer tensor"),
    (lambda f, g: setattr(g, "node_pb", BOOK * 2), "names partition 2, outside"),
    (lambda f, g: setattr(g, "partition_idx", 2), "partition_idx 2 is outside"),
    (lambda f, g: g.meta.update({"num_parts": 3}), "meta\\['num_parts'\\] is 3"),
])
def test_bad_books_get_one_line_errors(change, message: str) -> None:
    features, graph = _stores(0)
    change(features, graph)
    with pytest.raises(ValueError, match=message):
        plan_partition(features, graph)


def test_rows_missing_for_owned_nodes_and_bad_edge_ids_are_named() -> None:
    features, graph = _stores(0)
    features.put_tensor(torch.zeros(7, 2), group_name=None, attr_name="y")
    features.remove_global_id(None)  # rows are ids 0..6 now: owned ids 0..4 are there
    plan_partition(features, graph)
    features, graph = _stores(1)
    features.put_global_id(torch.tensor([0, 4, 5, 6, 7, 8, 10]), group_name=None)
    with pytest.raises(ValueError, match="no row for some of the nodes it owns"):
        plan_partition(features, graph)
    plans = [plan_partition(*_stores(0)), plan_partition(*_stores(1, with_ids=False))]
    with pytest.raises(ValueError, match="some ranks put edge ids"):
        build_partition(plans[0], [p.info() for p in plans])
    _, graph = _stores(1)
    graph.put_edge_id(HELD[1] + 1, edge_type=None, layout="coo", is_sorted=True,
                      size=(10, 10))
    plans[1] = plan_partition(_stores(1)[0], graph)
    with pytest.raises(ValueError, match="do not number their 12 edges"):
        build_partition(plans[0], [p.info() for p in plans])


def test_hetero_stores_in_memory_build_one_partition_per_rank() -> None:
    g = torch.Generator().manual_seed(1)
    nodes = {"a": 6, "b": 5}
    types = [("a", "to", "b"), ("b", "to", "a")]
    edges = {t: torch.stack([torch.randint(0, nodes[t[0]], (12,), generator=g),
                             torch.randint(0, nodes[t[2]], (12,), generator=g)]) for t in types}
    book = {"a": torch.tensor([0, 1, 0, 1, 0, 1]), "b": torch.tensor([1, 1, 0, 0, 1])}
    plans = []
    for rank in (0, 1):
        held = {t: book[t[2]][e[1]] == rank for t, e in edges.items()}  # own in-edges
        held = {t: h | (torch.arange(12) % 3 == 0) for t, h in held.items()}  # and others
        features = LocalFeatureStore.from_hetero_data(
            {t: torch.arange(n) for t, n in nodes.items()},
            x_dict={t: torch.arange(n).float().view(-1, 1) for t, n in nodes.items()})
        graph = LocalGraphStore.from_hetero_data(
            {t: torch.nonzero(held[t]).view(-1) for t in types},
            {t: edges[t][:, held[t]] for t in types}, nodes)
        graph.node_pb = book
        graph.num_partitions, graph.partition_idx = 2, rank
        plans.append(plan_partition(features, graph))
    built = [build_partition(p, [q.info() for q in plans]) for p in plans]
    assert built[0][1].meta.uid == built[1][1].meta.uid
    for edge_type in types:
        ids = torch.cat([g.original_coo(edge_type)[2] for _, g in built])
        assert sorted(ids.tolist()) == list(range(12))  # every edge once, at its owner
        for _, graph in built:
            src, dst, eid = graph.original_coo(edge_type)
            assert torch.equal(torch.stack([src, dst]), edges[edge_type][:, eid])
    for features, graph in built:
        for node_type, owner in book.items():
            owned = features.get_global_id(node_type)
            assert torch.equal(owned, torch.nonzero(owner == graph.part).view(-1))
            assert torch.equal(features.get_tensor(node_type, "x", index=owned).view(-1),
                               owned.float())
