"""The one id-translation module: OwnedIds.find on both paths, check_ids, and the
batch memo that lets ``emb(batch.n_id)`` skip translation (one process)."""
from __future__ import annotations

import gc

import pytest
import torch

from pyg_dist.store._original_ids import BatchIds, OwnedIds, check_ids


@pytest.mark.parametrize("ids", [torch.tensor([3, 8, 9, 20, 41]),      # increasing: searchsorted
                                 torch.tensor([20, 3, 41, 9, 8])])     # CSC order: chunked scan
def test_find_answers_owned_ids_and_minus_one_for_others(ids):
    owned = OwnedIds(ids, offset=100, total=50, what="node type 'x'", part=1)
    queries = torch.tensor([0, 3, 9, 10, 41, 49])
    want = torch.tensor([-1, 100 + int((ids == 3).nonzero()), 100 + int((ids == 9).nonzero()),
                         -1, 100 + int((ids == 41).nonzero()), -1])
    assert torch.equal(owned.find(queries), want)
    assert torch.equal(owned.to_relabelled(torch.tensor([41, 3])), want[[4, 1]])
    assert torch.equal(owned.find(queries), want)  # and again once a sorted table exists
    assert owned.find(torch.empty(0, dtype=torch.long)).numel() == 0


def test_check_ids_names_the_argument():
    assert torch.equal(check_ids([1, 2], 5, "seeds"), torch.tensor([1, 2]))
    assert check_ids(torch.tensor([1], dtype=torch.int32), 5, "seeds").dtype == torch.int64
    with pytest.raises(ValueError, match=r"seeds holds original id 5 outside \[0, 5\) of "
                                         r"node type 'paper'"):
        check_ids(torch.tensor([0, 5]), 5, "seeds", "node type 'paper'")
    with pytest.raises(TypeError, match="eids must be an integer tensor of original ids, got "
                                        "dtype torch.float32"):
        check_ids(torch.tensor([1.0]), 5, "eids")
    with pytest.raises(TypeError, match="ids must be an integer tensor .* got str"):
        check_ids("1", 5, "ids")


def test_batch_ids_recall_only_the_same_tensor_while_alive():
    memo = BatchIds(capacity=2)
    n_id, part = torch.tensor([7, 1]), torch.tensor([0, 4])
    memo.remember(n_id, part)
    assert memo.recall(n_id) is part
    assert memo.recall(n_id.clone()) is None  # equal values, another tensor: not trusted
    others = [torch.tensor([i]) for i in range(2)]
    for t in others:
        memo.remember(t, t + 1)
    assert memo.recall(n_id) is None  # the oldest was forgotten (capacity 2)
    del others, t
    gc.collect()
    assert len(memo) == 0  # forgotten with their tensors
