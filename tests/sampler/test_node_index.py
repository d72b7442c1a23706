"""NodeIndex on any key: never an out-of-bounds probe, never a silently cast key."""
import pytest
import torch

from pyg_dist.sampler.node_index import NodeIndex


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
