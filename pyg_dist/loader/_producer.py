"""One batch, end to end: sample -> fetch features -> collate (the same in-process
and in sampler worker processes)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from pyg_dist.loader._collate import Batch, OriginalIds, collate
from pyg_dist.loader._id_collective import label_rows
from pyg_dist.sampler import _timing as timing
from pyg_dist.sampler._cache.feature_cache import CacheStats
from pyg_dist.store._original_ids import ID_ATTR
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
from pyg_dist._typing import EdgeType, NodeType


@dataclass
class ProducerSpec:
    """Everything needed to rebuild a producer in another process (picklable).

    Args:
        sampler_kwargs: keyword arguments of :class:`DistNeighborSampler` (minus data).
        kind: ``"node"`` or ``"link"``.
        input_type: node type (node batches) or edge type (link batches) of the seeds.
        neg_sampling: negative sampling of link batches.
    """
    sampler_kwargs: Dict[str, Any]
    kind: str
    input_type: Optional[Union[NodeType, EdgeType]] = None
    neg_sampling: Optional[NegativeSampling] = None


@dataclass
class BatchTask:
    """One batch to build: its sampler input and the key of its random streams.

    Args:
        inputs: the sampler input (seeds of the batch).
        rng_key: ``(seed, epoch, batch index, rank)``; every random draw of the batch
            (hops, negatives) comes from a generator made from it, so a batch samples
            the same neighbourhoods in-process or in any worker, in any order, and
            after a resume.
    """
    inputs: Union[NodeSamplerInput, EdgeSamplerInput]
    rng_key: Tuple[int, ...]

    def rng(self) -> np.random.Generator:
        return np.random.default_rng([int(k) & 0xFFFFFFFFFFFFFFFF for k in self.rng_key])


class BatchProducer:
    """Turns a sampler input into a ``Data``/``HeteroData`` batch.

    Args:
        sampler (DistNeighborSampler): the sampler of this process.
        spec (ProducerSpec): what kind of batches to build.
    """

    def __init__(self, sampler: DistNeighborSampler, spec: ProducerSpec) -> None:
        self.sampler = sampler
        self.spec = spec
        self.repeats = sampler.config.disjoint or sampler.config.replace

    async def produce(self, task: BatchTask) -> Batch:
        """The batch of ``task``."""
        return (await self.produce_timed(task)).batch

    async def produce_timed(self, task: BatchTask) -> "Produced":
        """The batch of ``task`` and where its time went
        (:class:`~pyg_dist.sampler._timing.BatchTimes`)."""
        with timing.recording() as times:
            batch = await self._produce(task, times)
        return Produced(batch, times)

    async def _produce(self, task: BatchTask, times: timing.BatchTimes) -> Batch:
        inputs, rng = task.inputs, task.rng()
        if self.spec.kind == "node":
            batch = await self.sampler.sample_nodes(inputs, rng)  # type: ignore[arg-type]
        else:
            batch = await self.sampler.sample_edges(inputs,  # type: ignore[arg-type]
                                                    self.spec.neg_sampling, rng)
        sub = batch.subgraph
        repeats = self.repeats or getattr(batch.seeds, "repeated", False)
        feats = await self.sampler.fetcher.fetch(sub.node, sub.edge, unique=repeats,
                                                 every_type=True)
        # owners sent every node's original id with its rows, and every edge's with the
        # hop that sampled it (pyg_dist.store._original_ids)
        nodes = {t: a.pop(ID_ATTR) for t, a in feats.nodes.items() if ID_ATTR in a}
        edges = dict(sub.original_edge or {})
        start = timing.now_ns()
        labels = self.sampler.features.labels
        if labels is not None and self.spec.kind == "node":  # torch_geometric.distributed's
            node_type = batch.seeds.input_type               # feature.labels
            feats.nodes.setdefault(node_type, {})["y"] = label_rows(
                labels, nodes[node_type], sub.node[node_type], self.sampler.local.ids,
                node_type)
        out = collate(batch, feats, self.sampler.meta, OriginalIds(nodes, edges))
        times.seeds = int(batch.seeds.input_id.numel())
        timing.lap(times, "collate", start)
        return out


@dataclass
class Produced:
    """A batch, with where its time went and (sampler workers) what their feature
    cache did for it, which the trainer adds up.

    Args:
        batch: the ``Data``/``HeteroData`` batch.
        times: its stage times and rows moved.
        cache: the feature cache's counts for this batch (workers only).
    """
    batch: Batch
    times: Optional[timing.BatchTimes] = None
    cache: Optional[CacheStats] = None
