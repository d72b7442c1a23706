"""Synthetic community graphs: the power-law variant has a heavy degree tail, no
self-loops, both directions of every pair, and is a pure function of its arguments."""
import pytest
import torch

from pyg_dist.datasets import community_graph


def test_power_law_degrees_have_a_heavy_tail():
    uniform = community_graph(20_000, avg_degree=20, feat_dim=2, seed=3)
    heavy = community_graph(20_000, avg_degree=20, feat_dim=2, seed=3, power_law=2.5)
    degrees = {}
    for name, g in (("uniform", uniform), ("heavy", heavy)):
        ei = g.edge_index
        assert ei.size(1) == 20 * 20_000 and not bool((ei[0] == ei[1]).any())
        half = ei.size(1) // 2
        assert torch.equal(ei[:, :half].flip(0), ei[:, half:])  # every pair both ways
        degrees[name] = torch.bincount(ei[1], minlength=g.num_nodes).float()
    assert degrees["uniform"].max() < 3 * 20
    assert degrees["heavy"].max() > 20 * 20 and degrees["heavy"].median() < 20
    assert degrees["heavy"].max() <= 20 * 20_000 ** 0.5  # the structural cut-off holds
    intra = (heavy.y[heavy.edge_index[0]] == heavy.y[heavy.edge_index[1]]).float().mean()
    assert intra > 0.8  # still community structured (p_in=0.85)
    again = community_graph(20_000, avg_degree=20, feat_dim=2, seed=3, power_law=2.5)
    assert torch.equal(again.edge_index, heavy.edge_index)


def test_power_law_exponent_is_checked():
    with pytest.raises(ValueError, match="exponent > 2"):
        community_graph(100, power_law=1.5)
