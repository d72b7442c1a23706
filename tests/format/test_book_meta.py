"""One-process unit tests of the range partition book and the META.json round trip."""
from __future__ import annotations

import json

import pytest
import torch

from pyg_dist.format import RangeBook
from pyg_dist.format._meta import AttrSpec, PartitionMeta, PartStats
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE


def test_owner_lookup_with_an_empty_partition() -> None:
    book = RangeBook([0, 3, 3, 7], name="node ids")
    assert book.num_parts == 3 and book.total == 7
    assert [book.size(p) for p in range(3)] == [3, 0, 4] and book.start(2) == 3
    ids = torch.tensor([0, 2, 3, 6, 4])
    assert book.owner(ids).tolist() == [0, 0, 2, 2, 2]
    assert book.owner(torch.tensor([], dtype=torch.long)).numel() == 0
    assert book.owns(0, ids).tolist() == [True, True, False, False, False]
    assert not bool(book.owns(1, ids).any())
    assert book.to_local(2, torch.tensor([3, 6])).tolist() == [0, 3]


def test_to_local_and_check_errors() -> None:
    book = RangeBook([0, 5, 10], name="edge ids of type a__b__c")
    with pytest.raises(ValueError, match=r"partition 0 owns ids \[0, 5\).*\[7\]"):
        book.to_local(0, torch.tensor([1, 7]))
    with pytest.raises(ValueError, match=r"a__b__c: id 10 is out of range \[0, 10\)"):
        book.owner(torch.tensor([0, 10]))
    with pytest.raises(ValueError, match=r"id -1 is out of range"):
        book.check(torch.tensor([-1, 3]))
    book.check(torch.tensor([0, 9]))
    assert book.owner(torch.tensor([10]), check=False).tolist() == [2]  # unchecked: past the end


@pytest.mark.parametrize("offsets", [[], [0], [1, 4], [0, 4, 2]])
def test_bad_offsets_are_refused(offsets: list) -> None:
    with pytest.raises(ValueError, match="partition book of ids"):
        RangeBook(offsets)


def _homo_meta() -> PartitionMeta:
    return PartitionMeta(
        num_parts=2, is_hetero=False, node_types=(HOMO_NODE,), edge_types=(HOMO_EDGE,),
        num_nodes={HOMO_NODE: 5}, num_edges={HOMO_EDGE: 8},
        node_offsets={HOMO_NODE: (0, 3, 5)}, edge_offsets={HOMO_EDGE: (0, 6, 8)},
        node_attrs={HOMO_NODE: {"x": AttrSpec("float32", (4,)), "y": AttrSpec("int64", ())}},
        edge_attrs={HOMO_EDGE: {"w": AttrSpec("float32", ())}},
        splits=("train", "val"), method="random", seed=3,
        parts=(PartStats({HOMO_NODE: 3}, {HOMO_NODE: 1}, {HOMO_EDGE: 6}, {HOMO_EDGE: 2}, 2),
               PartStats({HOMO_NODE: 2}, {HOMO_NODE: 2}, {HOMO_EDGE: 2}, {HOMO_EDGE: 1}, 1)),
        uid="ab" * 32)


def _hetero_meta() -> PartitionMeta:
    writes, cites = ("author", "writes", "paper"), ("paper", "cites", "paper")
    return PartitionMeta(
        num_parts=2, is_hetero=True, node_types=("paper", "author"), edge_types=(writes, cites),
        num_nodes={"paper": 4, "author": 2}, num_edges={writes: 3, cites: 0},
        node_offsets={"paper": (0, 2, 4), "author": (0, 0, 2)},
        edge_offsets={writes: (0, 1, 3), cites: (0, 0, 0)},
        node_attrs={"paper": {"time": AttrSpec("int64", ())}, "author": {}},
        edge_attrs={writes: {"edge_attr": AttrSpec("bfloat16", (2, 3))}, cites: {}},
        splits=("train",), method="metis", seed=0, parts=(), uid="0123456789abcdef" * 4)


@pytest.mark.parametrize("make", [_homo_meta, _hetero_meta])
def test_meta_round_trip(make) -> None:
    meta = make()
    text = json.dumps(meta.to_json())
    back = PartitionMeta.from_json(json.loads(text))
    assert back == meta and back.uid == meta.uid
    assert json.loads(text)["uid"] == meta.uid
    assert json.dumps(back.to_json()) == text
