"""The joint hop kernel: one pass over several partitions' CSCs draws exactly what the
per-partition kernels draw, in frontier order, and refuses what it cannot read."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dist.format._schema import PartitionFormatError
from pyg_dist.sampler import _joint_hop as joint
from pyg_dist.sampler._sample_kernels import sample_one_hop

ET = ("n", "to", "n")
NUM_SRC = 1000


def _partition(rows: int, edges_before: int, dtype, id_dtype, seed: int):
    """A random CSC over ``rows`` destinations (degrees 0 to 90: Floyd and Fisher-Yates
    rows both) and its edges' original ids."""
    g = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, 91, (rows,), generator=g)
    deg[::7] = 0
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), deg.cumsum(0)])
    indices = torch.randint(0, NUM_SRC, (int(indptr[-1]),), generator=g).to(dtype)
    ids = (torch.randperm(10_000, generator=g)[:indices.numel()]).to(id_dtype)
    return indptr, indices, ids


@pytest.fixture
def three():
    """Three partitions of 40, 25 and 35 destination rows, int64 and int32 indices and
    original ids mixed."""
    sizes, kinds = (40, 25, 35), ((torch.int64, torch.int32), (torch.int32, torch.int64),
                                  (torch.int32, torch.int32))
    parts, edges = [], 0
    for p, (rows, (dtype, id_dtype)) in enumerate(zip(sizes, kinds)):
        indptr, indices, ids = _partition(rows, edges, dtype, id_dtype, p)
        parts.append(joint.Reader(p, indptr, indices, edges, ids, f"part{p}/graph.pt"))
        edges += indices.numel()
    offsets = torch.tensor([0, 40, 65, 100])
    return parts, offsets, edges


def _per_partition(parts, offsets, seeds, fanout, replace, rng_seed, type_index):
    """What the per-partition path draws: each owner's seeds, in frontier order, on its
    own stream, put back in frontier order."""
    owner = torch.searchsorted(offsets[1:], seeds, right=True)
    counts = torch.zeros(seeds.numel(), dtype=torch.long)
    pieces = {}
    for r in parts:
        mine = (owner == r.part).nonzero().view(-1)
        if mine.numel() == 0:
            continue
        hop = sample_one_hop(r.indptr, r.indices, seeds[mine] - offsets[r.part], fanout,
                             replace, rng_seed + joint.PART_STRIDE * r.part + type_index[r.part],
                             edge_values=r.values)
        counts[mine] = hop.counts
        per_seed = zip(hop.nbrs.long().split(hop.counts.tolist()),
                       (hop.pos + r.edge_offset).split(hop.counts.tolist()),
                       hop.values.split(hop.counts.tolist()))
        for i, piece in zip(mine.tolist(), per_seed):
            pieces[i] = piece
    order = [pieces[i] for i in range(seeds.numel()) if i in pieces]
    return counts, *(torch.cat([p[k] for p in order]) for k in range(3))


@pytest.mark.parametrize("fanout,replace", [(3, False), (70, False), (-1, False),
                                            (4, True), (0, False)])
def test_joint_draws_what_each_partition_draws_in_frontier_order(three, fanout, replace):
    parts, offsets, edges = three
    tables = joint.JointTables(parts, offsets, edges, 4)  # a fourth partition is not here
    g = torch.Generator().manual_seed(5)
    seeds = torch.cat([torch.randperm(100, generator=g)[:60], torch.tensor([3, 3, 70])])
    used = np.array([0, 2, 1, 0], dtype=np.int64)  # earlier edge types each partition had
    counts, nbrs, eids, values, had = joint.sample_joint(
        tables, seeds, fanout, replace, joint.stream_seeds(11, tables.parts, used), NUM_SRC,
        10_000, ET)
    want = _per_partition(parts, offsets, seeds, fanout, replace, 11, used)
    for got, expected in zip((counts, nbrs, eids, values), want):
        assert got.dtype == torch.long and torch.equal(got, expected)
    assert had.tolist() == [True, True, True]


def test_values_are_drawn_into_the_callers_buffer(three):
    parts, offsets, edges = three
    tables = joint.JointTables(parts, offsets, edges, 3)
    buf = torch.full((4096,), -1, dtype=torch.long)
    streams = joint.stream_seeds(1, tables.parts, np.zeros(3, dtype=np.int64))
    _, nbrs, _, values, _ = joint.sample_joint(tables, torch.arange(100), 5, False, streams,
                                               NUM_SRC, 10_000, ET, values_out=buf)
    assert values.data_ptr() == buf.data_ptr() and torch.equal(buf[:nbrs.numel()], values)
    short = torch.empty(3, dtype=torch.long)  # too short: a new array instead
    _, _, _, again, _ = joint.sample_joint(tables, torch.arange(100), 5, False, streams,
                                           NUM_SRC, 10_000, ET, values_out=short)
    assert again.data_ptr() != short.data_ptr() and torch.equal(again, values)


def test_a_seed_no_partition_here_owns_is_refused(three):
    parts, offsets, edges = three
    tables = joint.JointTables(parts[:2], offsets, edges, 3)  # partition 2 is not here
    streams = joint.stream_seeds(1, tables.parts, np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="seed 70 is owned by no partition read here"):
        joint.sample_joint(tables, torch.tensor([1, 41, 70]), 2, False, streams, NUM_SRC,
                           10_000, ET)
    with pytest.raises(ValueError, match="seed 100 is owned by no partition"):
        joint.sample_joint(tables, torch.tensor([100]), 2, False, streams, NUM_SRC, 10_000, ET)


def test_damaged_files_are_named(three):
    parts, offsets, edges = three
    bad = parts[1].indices.clone()
    bad[int(parts[1].indptr[1])] = NUM_SRC  # a source id past the node type's range
    damaged = [parts[0], joint.Reader(1, parts[1].indptr, bad, parts[1].edge_offset,
                                      parts[1].values, "part1/graph.pt"), parts[2]]
    tables = joint.JointTables(damaged, offsets, edges, 3)
    streams = joint.stream_seeds(1, tables.parts, np.zeros(3, dtype=np.int64))
    with pytest.raises(PartitionFormatError, match="part1/graph.pt.*source id 1000"):
        joint.sample_joint(tables, torch.arange(100), -1, False, streams, NUM_SRC, 10_000, ET)
    ids = parts[2].values.clone()
    ids[5] = -4  # an original edge id below 0
    damaged = parts[:2] + [joint.Reader(2, parts[2].indptr, parts[2].indices,
                                        parts[2].edge_offset, ids, "part2/edge_ids.pt")]
    tables = joint.JointTables(damaged, offsets, edges, 3)
    with pytest.raises(PartitionFormatError, match="part2/edge_ids.pt.*original id -4"):
        joint.sample_joint(tables, torch.arange(100), -1, False, streams, NUM_SRC, 10_000, ET)


def test_tables_refuse_inconsistent_partitions(three):
    parts, offsets, edges = three
    with pytest.raises(PartitionFormatError, match="part2/graph.pt: edges from"):
        joint.JointTables(parts, offsets, edges - 1, 3)  # the last partition's edges overflow
    short = joint.Reader(0, parts[0].indptr[:30], parts[0].indices, 0, parts[0].values,
                         "part0/graph.pt")
    with pytest.raises(PartitionFormatError, match="29 destination rows, the partition owns 40"):
        joint.JointTables([short] + parts[1:], offsets, edges, 3)
    broken = joint.Reader(0, parts[0].indptr.flip(0), parts[0].indices, 0, parts[0].values, "x")
    with pytest.raises(ValueError, match="indptr"):
        joint.JointTables([broken] + parts[1:], offsets, edges, 3)
    few_ids = joint.Reader(0, parts[0].indptr, parts[0].indices, 0, parts[0].values[:-1], "x")
    with pytest.raises(ValueError, match="edge_values"):
        joint.JointTables([few_ids] + parts[1:], offsets, edges, 3)
