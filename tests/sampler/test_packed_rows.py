"""One-value columns packed row by row: gathered and unpacked exactly, and never stale
after a column changes."""
import asyncio

import pytest
import torch

from pyg_dist.sampler import _packed_rows
from pyg_dist.sampler._features import FeatureFetcher
from pyg_dist.sampler._gather import place
from pyg_dist.sampler._packed_rows import PackedColumns, pack, packable, unpack


@pytest.fixture(autouse=True)
def pack_small_tables(monkeypatch):
    """Tables of a few hundred rows are packed as large ones are."""
    monkeypatch.setattr(_packed_rows, "MIN_PACKED_BYTES", 0)


def _columns(n: int) -> dict:
    g = torch.Generator().manual_seed(5)
    return {"mask": torch.rand(n, generator=g) < 0.5,
            "y": torch.randint(-2**40, 2**40, (n,), generator=g),
            "small": torch.randint(-100, 100, (n,), generator=g).to(torch.int16),
            "ids": torch.randint(0, 2**31 - 1, (n,), generator=g).to(torch.int32),
            "f": torch.randn(n, generator=g)}


def _outputs(columns: dict, rows: int) -> dict:
    return {a: torch.full((rows,), 7, dtype=torch.long if a == "ids" else c.dtype)
            for a, c in columns.items()}


@pytest.mark.parametrize("scatter", [False, True])
def test_packed_records_unpack_to_the_rows_of_every_column(scatter):
    columns = _columns(1000)
    packed = pack(columns)
    assert packed.table.size(1) % 8 == 0 and list(packed.fields) == list(columns)
    rows = torch.randint(0, 1000, (300,), generator=torch.Generator().manual_seed(1))
    records = torch.empty(300, packed.table.size(1), dtype=torch.uint8)
    place(records, (0, 300), packed.table, rows)
    out = _outputs(columns, 400)
    blank = {a: v.clone() for a, v in out.items()}
    where = torch.randperm(400)[:300] if scatter else (50, 350)
    unpack(records, packed, out, where)
    at = where if scatter else torch.arange(50, 350)
    for attr, column in columns.items():
        assert torch.equal(out[attr][at], column[rows].to(out[attr].dtype)), attr
        untouched = torch.ones(400, dtype=torch.bool)
        untouched[at] = False
        assert torch.equal(out[attr][untouched], blank[attr][untouched]), attr


def test_only_one_value_columns_of_equal_length_are_packed():
    columns = _columns(10)
    columns["x"] = torch.randn(10, 3)
    out = _outputs(columns, 10)
    assert packable(columns, out) == ["mask", "y", "small", "ids", "f"]
    assert packable({"y": columns["y"], "x": columns["x"]}, out) == []  # one alone: no
    assert packable({"y": columns["y"], "f": columns["f"][:5]}, out) == []


def test_tables_that_stay_in_cache_are_not_packed(monkeypatch):
    columns = _columns(1000)  # 19 bytes a row
    monkeypatch.setattr(_packed_rows, "MIN_PACKED_BYTES", 19 * 1000 + 1)
    assert packable(columns, _outputs(columns, 10)) == []
    monkeypatch.setattr(_packed_rows, "MIN_PACKED_BYTES", 19 * 1000)
    assert len(packable(columns, _outputs(columns, 10))) == 5


def test_packed_columns_are_rebuilt_when_a_column_changes():
    columns = _columns(20)
    cache = PackedColumns()
    first = cache.get("k", columns)
    assert cache.get("k", columns) is first
    columns["y"][3] = 11  # written in place
    second = cache.get("k", columns)
    assert second is not first
    assert int(second.table[3, second.fields["y"][0]:][:8].view(torch.int64)) == 11
    columns["mask"] = ~columns["mask"]  # another tensor in its place
    third = cache.get("k", columns)
    assert third is not second
    rec = torch.empty(20, third.table.size(1), dtype=torch.uint8)
    place(rec, (0, 20), third.table, torch.arange(20))
    out = _outputs(columns, 20)
    unpack(rec, third, out, (0, 20))
    assert torch.equal(out["mask"], columns["mask"])


def test_fetched_rows_follow_a_column_written_between_batches(homo_parted):
    meta = homo_parted.meta
    (node_type,) = meta.node_types
    sampler = homo_parted.samplers[1]
    fetcher = FeatureFetcher(homo_parted.group(1), sampler, meta)
    book = meta.node_book(node_type)
    ids = torch.arange(book.start(1), book.start(2))
    assert packable({a: sampler.column(node_type, a) for a in ("y", "time")},
                    {"y": ids, "time": ids})  # the packed path is the one tested
    before = asyncio.run(fetcher.fetch({node_type: ids}, {}, unique=False))
    y = sampler.features.tensor(node_type, "y")
    y.add_(100)
    try:
        after = asyncio.run(fetcher.fetch({node_type: ids}, {}, unique=False))
    finally:
        y.sub_(100)
    assert torch.equal(after.nodes[node_type]["y"], before.nodes[node_type]["y"] + 100)
    assert torch.equal(after.nodes[node_type]["time"], before.nodes[node_type]["time"])
