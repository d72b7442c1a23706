"""Small partitioned graphs and an in-process stand-in for the RPC group (helpers of
the sampler tests; ``conftest.py`` turns them into fixtures).

``FakeGroup`` serves every partition from its own ``LocalSampler`` in this process, so
the request packing, routing and response checks of :class:`FeatureFetcher` run
without RPC; ``tamper`` lets a test corrupt a response the way a faulty peer would.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import torch
from torch_geometric.data import HeteroData

from pyg_dist.format import PartitionMeta
from pyg_dist.sampler import LocalSampler
from pyg_dist.sampler._types import FeatureRequest, FeatureResponse
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.testing import encode_ids

Tamper = Callable[[int, FeatureRequest, FeatureResponse], FeatureResponse]


class FakeGroup:
    """Routes partition ``p`` to rank ``p`` and answers ``sampler.features`` calls
    from ``samplers[p]`` in-process (optionally through ``tamper``)."""

    def __init__(self, samplers: List[LocalSampler], part: int,
                 tamper: Optional[Tamper] = None, error: Optional[Exception] = None) -> None:
        self.samplers = samplers
        self.part = part
        self.rank = part
        self.tamper = tamper
        self.error = error  # every call fails with it (a dead peer)
        self.calls: List[Tuple[int, FeatureRequest]] = []

    def route(self, part: int) -> int:
        return part

    def describe(self, rank: int) -> str:
        return f"fake worker (rank {rank}, partition {rank})"

    def call_async(self, rank: int, callee: str, request: FeatureRequest):
        assert callee == "sampler.features" and rank != self.part
        self.calls.append((rank, request))
        fut = asyncio.get_running_loop().create_future()
        if self.error is not None:
            fut.set_exception(self.error)
            return fut
        response = self.samplers[rank].features_of(request)
        if self.tamper is not None:
            response = self.tamper(rank, request, response)
        fut.set_result(response)
        return fut


@dataclass
class Parted:
    """A partitioned graph loaded back: one sampler per partition, and the META."""
    root: Path
    meta: PartitionMeta
    samplers: List[LocalSampler]

    def group(self, part: int, tamper: Optional[Tamper] = None,
              error: Optional[Exception] = None) -> FakeGroup:
        return FakeGroup(self.samplers, part, tamper, error)

    def full(self, kind: str, group, attr: str) -> torch.Tensor:
        """Ground truth: an attribute for every global id (partitions own contiguous
        ranges, so it is their rows concatenated)."""
        return torch.cat([s.features.tensor(group, attr) for s in self.samplers])


def small_hetero(seed: int = 0) -> HeteroData:
    """Two node types, three edge types, attributes of several dtypes and widths
    (row sizes that are multiples of 8, of 4 and of neither)."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["a"].x = torch.randn(150, 5, generator=g)                       # 20 B rows
    data["a"].flag = torch.randint(0, 255, (150, 3), generator=g).to(torch.uint8)  # 3 B
    data["a"].time = torch.randint(0, 100, (150,), generator=g)
    data["b"].x = torch.randn(100, 2, 2, generator=g, dtype=torch.float64)  # 32 B rows
    data["b"].time = torch.randint(0, 100, (100,), generator=g)
    for src, rel, dst, n in (("a", "to", "b", 400), ("b", "to", "a", 300), ("a", "self", "a", 500)):
        num_src, num_dst = data[src].num_nodes, data[dst].num_nodes
        data[src, rel, dst].edge_index = torch.stack([
            torch.randint(0, num_src, (n,), generator=g),
            torch.randint(0, num_dst, (n,), generator=g)])
        data[src, rel, dst].w = torch.rand(n, generator=g)
        data[src, rel, dst].time = torch.randint(0, 100, (n,), generator=g)
    return encode_ids(data)


def load_parted(root: Path, num_parts: int) -> Parted:
    samplers = [LocalSampler(LocalGraphStore.from_partition(root, p),
                             LocalFeatureStore.from_partition(root, p))
                for p in range(num_parts)]
    return Parted(root, samplers[0].graph.meta, samplers)
