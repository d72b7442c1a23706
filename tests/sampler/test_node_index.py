"""NodeIndex on any key: never an out-of-bounds probe, never a silently cast key."""
import pytest
import torch

from pyg_dist.sampler._node_index import NodeIndex


def test_lookup_of_any_int64_key_is_safe():
    index = NodeIndex(4)
    index.insert(torch.tensor([0, 2**62, 5, 2**63 - 1]))
    keys = torch.tensor([-1, -(2**63), 2**63 - 1, 2**62, 7, 5, 0])
    assert index.lookup(keys).tolist() == [-1, -1, 3, 1, -1, 2, 0]


def test_keys_must_be_non_negative_integers():
    index = NodeIndex(4)
    with pytest.raises(ValueError, match="non-negative"):
        index.insert(torch.tensor([3, -(2**63)]))
    assert len(index) == 0  # nothing half-inserted
    for bad in (torch.tensor([1.5]), torch.tensor([True])):
        with pytest.raises(TypeError, match="integer"):
            index.insert(bad)
        with pytest.raises(TypeError, match="integer"):
            index.lookup(bad)
    with pytest.raises(ValueError, match="1-D"):
        index.insert(torch.tensor([[1, 2]]))
    index.insert(torch.tensor([1, 2], dtype=torch.int32))
    assert index.lookup(torch.tensor([2], dtype=torch.int16)).tolist() == [1]


def test_table_grows_with_distinct_keys_not_keys_offered():
    index = NodeIndex(16)
    keys = torch.arange(5000) % 40  # 5000 keys offered, 40 distinct
    assert index.insert(keys).tolist() == (torch.arange(5000) % 40).tolist()
    assert index.capacity == 64  # 16 -> 32 -> 64, not sized by 5000
    many = torch.randperm(10_000)  # growth in the middle of one insert keeps positions
    pos = index.insert(many)
    assert len(index) == 10_000 and index.capacity >= 10_000
    assert torch.equal(index.keys[pos], many)
    assert torch.equal(index.lookup(many), pos)


def test_cleared_and_pooled_indexes_start_empty():
    from pyg_dist.sampler._node_index import NodeIndexPool

    pool = NodeIndexPool(keep=1)
    first = pool.take(8)
    first.insert(torch.tensor([3, 1, 3, 9]))
    pool.give(first)
    again = pool.take(8)
    assert again is first and len(again) == 0
    assert again.lookup(torch.tensor([3, 1, 9])).tolist() == [-1, -1, -1]
    assert again.insert(torch.tensor([9, 4, 9])).tolist() == [0, 1, 0]
    assert again.keys.tolist() == [9, 4]
    other = pool.take(8)
    assert other is not again
    pool.give(again)
    pool.give(other)  # beyond keep: dropped
    assert pool.take(8) is again and pool.take(8) is not other


def test_direct_table_matches_the_hash_table_and_refuses_keys_out_of_bound():
    from pyg_dist.sampler._node_index import direct_for

    assert direct_for(1000, 4000) and not direct_for(1000, 10_000) and not direct_for(1000, None)
    direct, hashed = NodeIndex(1000, key_bound=3000), NodeIndex(1000)
    assert direct.key_bound == 3000 and hashed.key_bound is None
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        keys = torch.randint(0, 3000, (5000,), generator=g)
        assert torch.equal(direct.insert(keys), hashed.insert(keys))
    assert torch.equal(direct.keys, hashed.keys)
    probe = torch.tensor([-1, -(2**63), 2**63 - 1, 3000, 2999, 0, 17])
    assert torch.equal(direct.lookup(probe), hashed.lookup(probe))
    size = len(direct)
    with pytest.raises(ValueError, match="below 3000"):
        direct.insert(torch.tensor([5, 3000]))
    with pytest.raises(ValueError, match="non-negative"):
        direct.insert(torch.tensor([5, -1]))
    assert len(direct) == size  # nothing half-inserted


@pytest.mark.parametrize("count", [3, 2500])  # a few keys, or most of the table
def test_cleared_direct_table_forgets_every_key(count):
    index = NodeIndex(1000, key_bound=3000)
    keys = torch.randperm(3000)[:count]
    index.insert(keys)
    index.clear()
    assert len(index) == 0
    assert bool((index.lookup(torch.arange(3000)) == -1).all())
    assert index.insert(keys.flip(0)).tolist() == list(range(count))


def test_pool_hands_out_direct_tables_once_batches_fill_them():
    from pyg_dist.sampler._node_index import NodeIndexPool

    pool = NodeIndexPool()
    first = pool.take(16, key_bound=100_000)  # too few keys expected: a hash table
    assert first.key_bound is None
    first.insert(torch.arange(0, 100_000, 3))  # 33k keys: a direct table is no larger
    pool.give(first)
    second = pool.take(16, key_bound=100_000)
    assert second.key_bound == 100_000 and len(second) == 0
    pool.give(second)
    assert pool.take(16, key_bound=100_000) is second
    assert pool.take(16, key_bound=None).key_bound is None  # disjoint keys: hashed
