"""One batch, end to end: sample -> fetch features -> collate (the same in-process
and in sampler worker processes)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from pyg_dist.loader.collate import Batch, collate_links, collate_nodes
from pyg_dist.sampler.neighbor_sampler import DistNeighborSampler
from pyg_dist.typing import EdgeType, NodeType


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

    async def produce(self, inputs: Union[NodeSamplerInput, EdgeSamplerInput]) -> Batch:
        if self.spec.kind == "node":
            out = await self.sampler.sample_nodes(inputs)  # type: ignore[arg-type]
        else:
            out = await self.sampler.sample_edges(inputs, self.spec.neg_sampling)  # type: ignore
        nodes = out.node if isinstance(out.node, dict) else {self._node_type(): out.node}
        edges = out.edge if isinstance(out.edge, dict) else {self._edge_type(): out.edge}
        feats = await self.sampler.fetcher.fetch(nodes, edges, unique=self.repeats)
        meta = self.sampler.meta
        if self.spec.kind == "node":
            return collate_nodes(out, feats, meta, self.spec.input_type)  # type: ignore[arg-type]
        return collate_links(out, feats, meta, self.spec.input_type)  # type: ignore[arg-type]

    def _node_type(self) -> NodeType:
        return self.sampler.meta.node_types[0]

    def _edge_type(self) -> EdgeType:
        return self.sampler.meta.edge_types[0]
