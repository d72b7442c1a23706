"""DistTensor in one process (standalone mode) and the row layout over ranks."""
from __future__ import annotations

import pytest
import torch

from pyg_dist.embedding import DistTensor
from pyg_dist.embedding._layout import ShardLayout, even_split, rank_offsets, resolve_book
from pyg_dist.format import RangeBook


def test_even_split_and_rank_offsets() -> None:
    assert even_split(0, 10, 3) == [0, 4, 7, 10]
    assert even_split(5, 5, 2) == [5, 5, 5]
    assert rank_offsets(10, 1, RangeBook([0, 3, 10])) == [0, 10]
    assert rank_offsets(10, 4, None) == [0, 3, 6, 8, 10]
    # one rank per partition: the book itself
    assert rank_offsets(10, 2, RangeBook([0, 3, 10])) == [0, 3, 10]
    # two ranks per partition: each partition's range split evenly among its ranks
    assert rank_offsets(10, 4, RangeBook([0, 3, 10])) == [0, 2, 3, 7, 10]
    with pytest.raises(ValueError, match="cannot share 2 partition"):
        rank_offsets(10, 3, RangeBook([0, 3, 10]))


def test_layout_owner_skips_empty_shards() -> None:
    layout = ShardLayout((0, 2, 2, 5), rank=1)
    assert layout.owner(torch.tensor([0, 1, 2, 4])).tolist() == [0, 0, 2, 2]
    assert (layout.start, layout.stop, layout.world_size) == (2, 2, 3)


def test_resolve_book_checks() -> None:
    assert resolve_book([0, 4, 9], None, 9).offsets.tolist() == [0, 4, 9]
    with pytest.raises(ValueError, match="has 8 rows but its partition book"):
        resolve_book([0, 4, 9], None, 8)
    with pytest.raises(ValueError, match="node_type='paper' was given without a partition"):
        resolve_book(None, "paper", 8)
    with pytest.raises(TypeError, match="partition must be a RangeBook"):
        resolve_book("parts", None, 8)


def test_reads_writes_and_torch_like_attributes() -> None:
    t = DistTensor((6, 2), torch.float64, name="tensor_rw", partition=[0, 2, 6])
    assert t.shape == torch.Size([6, 2]) and t.dtype == torch.float64 and t.name == "tensor_rw"
    assert len(t) == 6 and t.size(1) == 2 and t.dim() == 2 and t.local_range == (0, 6)
    assert torch.equal(t[torch.arange(6)], torch.zeros(6, 2, dtype=torch.float64))
    values = torch.arange(8, dtype=torch.float64).view(4, 2)
    t[torch.tensor([5, 1, 5, 3])] = values  # id 5 twice: the last value wins
    assert torch.equal(t[[5, 1, 3]], values[[2, 1, 3]])
    assert torch.equal(t[1], values[1]) and t[2:4].shape == (2, 2)
    assert t[torch.tensor([[1, 5], [5, 1]])].shape == (2, 2, 2)
    assert t[torch.empty(0, dtype=torch.long)].shape == (0, 2)


def test_named_tensor_created_twice_shares_rows() -> None:
    first = DistTensor((4,), torch.long, name="tensor_shared",
                       init_func=lambda shape, dtype: torch.full(shape, 7, dtype=dtype))
    second = DistTensor((4,), torch.long, name="tensor_shared",
                        init_func=lambda shape, dtype: torch.ones(shape, dtype=dtype))
    assert second[[0]].tolist() == [7]  # not re-initialised
    second[[2]] = torch.tensor([3])
    assert first[[2]].tolist() == [3]
    with pytest.raises(ValueError, match="'tensor_shared' already exists with shape"):
        DistTensor((5,), torch.long, name="tensor_shared")


def test_bad_input_gets_clear_errors() -> None:
    t = DistTensor((5, 3), name="tensor_bad")
    with pytest.raises(ValueError, match=r"'tensor_bad': index holds id 5, out of range \[0, 5\)"):
        t[torch.tensor([0, 5])]
    with pytest.raises(ValueError, match=r"holds id -1, out of range \[0, 5\)"):
        t[[-1]] = torch.zeros(1, 3)
    with pytest.raises(TypeError, match="indexed by integer ids, got index of dtype "
                                        "torch.float32"):
        t[torch.tensor([1.0])]
    with pytest.raises(TypeError, match="holds torch.float32, got values of dtype torch.float64"):
        t[[1]] = torch.zeros(1, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"values must have shape \(2, 3\).*got \(2, 4\)"):
        t[[1, 2]] = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"init_func of DistTensor 'tensor_init' must return a "
                                         r"torch.float32 tensor of shape \(4, 2\)"):
        DistTensor((4, 2), name="tensor_init", init_func=lambda s, d: torch.zeros(3))
    with pytest.raises(ValueError, match="no negative sizes"):
        DistTensor((-1, 2))


def test_on_read_runs_after_every_read_under_the_lock() -> None:
    """``on_read`` (how inference drops mapped hidden-state pages, also after serving a
    peer's read) sees this rank's rows after each read, with the lock held; ``None``
    stops it."""
    t = DistTensor((6, 2), torch.float32, name="tensor_on_read")
    t[torch.arange(6)] = torch.arange(12, dtype=torch.float32).view(6, 2)
    seen = []
    t.on_read(lambda data: seen.append((data.data_ptr(), t.lock.locked())))
    rows = t[torch.tensor([4, 1])]
    assert torch.equal(rows, torch.tensor([[8.0, 9.0], [2.0, 3.0]]))
    assert seen == [(t.local_data.data_ptr(), True)]
    t.on_read(None)
    t[torch.tensor([0])]
    assert len(seen) == 1
