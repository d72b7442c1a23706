"""LABOR draws its edges' ids into the caller's buffer, as neighbour sampling does: the
same values, a view of the buffer when they fit, a new array when they do not."""
from __future__ import annotations

import pytest
import torch

from pyg_dist.sampler._labor import sample_labor_hop


def _csc(n: int = 50, m: int = 600):
    g = torch.Generator().manual_seed(3)
    src, dst = torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)
    order = torch.argsort(dst, stable=True)
    colptr = torch.zeros(n + 1, dtype=torch.long)
    colptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return colptr, src[order], (order * 7 + 1).to(torch.int32)


@pytest.mark.parametrize("room", [0, 1])
def test_labor_draws_edge_ids_into_values_out(room):
    colptr, row, eid = _csc()
    seeds, fanout = torch.arange(0, 50, 2), 4
    plain = sample_labor_hop(colptr, row, row.to(torch.int32), seeds, fanout, 11,
                             edge_ids=eid, edge_values=True)
    total = int(plain.counts.sum())
    assert total > 0
    buf = torch.full((total + 5 if room else total - 1,), -1, dtype=torch.long)
    hop = sample_labor_hop(colptr, row, row.to(torch.int32), seeds, fanout, 11,
                           edge_ids=eid, edge_values=True, values_out=buf)
    assert torch.equal(hop.values, plain.values) and torch.equal(hop.nbrs, plain.nbrs)
    assert torch.equal(hop.values, eid[hop.pos].long())
    if room:
        assert hop.values.data_ptr() == buf.data_ptr()
        assert torch.equal(buf[:total], plain.values) and bool((buf[total:] == -1).all())
    else:
        assert hop.values.data_ptr() != buf.data_ptr() and bool((buf == -1).all())


def test_labor_values_out_must_be_int64():
    colptr, row, eid = _csc()
    with pytest.raises(ValueError, match="values_out must be a contiguous 1-D int64"):
        sample_labor_hop(colptr, row, row, torch.tensor([0]), 2, 1, edge_ids=eid,
                         edge_values=True, values_out=torch.empty(8, dtype=torch.int32))
