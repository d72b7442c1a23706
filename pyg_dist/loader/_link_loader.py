"""``DistLinkNeighborLoader``: PyG's ``LinkNeighborLoader`` over a partitioned graph."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

from pyg_dist.loader._arguments import check_pair, check_ratio, check_tensor
from pyg_dist.loader._base import DistLoader
from pyg_dist.loader._construction import served_data
from pyg_dist.loader._id_collective import to_relabelled
from pyg_dist.loader._inputs import LOCAL_ERRORS, LoaderInput, Stores
from pyg_dist.loader._node_loader import as_id_tensor
from pyg_dist.loader._seeds import stored_edges
from pyg_dist.rpc._context import DistContext
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
from pyg_dist.sampler._stores import unpack_stores
from pyg_dist.store._original_ids import PartIds, check_ids
from pyg_dist.sampler._types import NumNeighbors
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist._typing import EdgeType

EdgeLabelIndex = Union[None, Tensor, EdgeType, Tuple[EdgeType, Optional[Tensor]]]


def _negative(neg_sampling: Union[None, str, Dict, NegativeSampling]
              ) -> Optional[NegativeSampling]:
    if neg_sampling is None or isinstance(neg_sampling, NegativeSampling):
        return neg_sampling
    if isinstance(neg_sampling, str):
        return NegativeSampling(neg_sampling)
    if isinstance(neg_sampling, dict):
        return NegativeSampling(**neg_sampling)
    raise TypeError(f"neg_sampling must be a NegativeSampling, its mode name or kwargs dict, "
                    f"got {type(neg_sampling).__name__}")


def _is_edge_type(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 3 and \
        all(isinstance(v, str) for v in value)


def resolve_edge_label_index(graph: LocalGraphStore, edge_label_index: EdgeLabelIndex
                             ) -> Tuple[Optional[EdgeType], Optional[Tensor]]:
    """``(edge type or None, [2, E] original ids)`` from PyG-style ``edge_label_index``:
    ``[2, E]`` original node ids (tensor or nested lists), an edge type,
    ``(edge_type, index)``, or ``None`` (every edge this partition stores: returned as
    ``None``, for :func:`~pyg_dist.loader._seeds.edge_split` to resolve)."""
    edge_type: Optional[EdgeType] = None
    index: Any = edge_label_index
    if _is_edge_type(edge_label_index):
        edge_type, index = tuple(edge_label_index), None  # type: ignore[assignment]
    elif isinstance(edge_label_index, tuple) and len(edge_label_index) == 2 and \
            (edge_label_index[0] is None or _is_edge_type(edge_label_index[0])):
        edge_type, index = edge_label_index
    resolved = graph.meta.edge_type(edge_type)
    if index is None:
        return (resolved if graph.is_hetero else None), None
    index = as_id_tensor(index, "edge_label_index")
    if index.dim() != 2 or index.size(0) != 2 or index.dtype not in (torch.long, torch.int32):
        raise TypeError(f"edge_label_index must be an integer tensor of shape [2, E], got "
                        f"{index.dtype} of shape {tuple(index.shape)}")
    check_ids(index[0], graph.meta.num_nodes[resolved[0]], "edge_label_index[0] (sources)")
    check_ids(index[1], graph.meta.num_nodes[resolved[2]],
              "edge_label_index[1] (destinations)")
    return (resolved if graph.is_hetero else None), index.long()


@dataclass
class LinkInput(LoaderInput):
    """Seed edges of a :class:`DistLinkNeighborLoader` (see :class:`LoaderInput`).

    Args:
        index (Tensor): ``[2, E]`` seed edges as original node ids (every stored
            edge: filled by :meth:`translate`).
        label (Tensor, optional): labels of the seed edges.
        time (Tensor, optional): times of the seed edges.
        all_stored (bool): the seeds are every edge this partition stores
            (``edge_label_index=None``), found collectively by :meth:`translate`.
        part_index (Tensor, optional): the seed edges as relabelled node ids.
        hetero (bool): the graph is heterogeneous (else samplers get no input type).
    """
    index: Optional[Tensor] = None
    label: Optional[Tensor] = None
    time: Optional[Tensor] = None
    all_stored: bool = False
    part_index: Optional[Tensor] = None
    hetero: bool = False

    @classmethod
    def resolve(cls, graph: LocalGraphStore, edge_label_index: EdgeLabelIndex,
                edge_label: Optional[Tensor], edge_label_time: Optional[Tensor],
                neg_sampling: Union[None, str, Dict, NegativeSampling],
                ratio: Optional[float], time_attr: Optional[str]) -> "LinkInput":
        """The seeds of PyG-style link loader arguments (the error kept, not raised)."""
        try:
            check_tensor("edge_label", edge_label)
            check_tensor("edge_label_time", edge_label_time)
            check_ratio("neg_sampling_ratio", ratio)
            check_pair("edge_label_time", edge_label_time, time_attr)
            input_type, index = resolve_edge_label_index(graph, edge_label_index)
            all_stored = index is None
            if all_stored:  # relabelled as stored; translate finds the original ids
                index = torch.stack(graph.csc_by_type[graph.meta.edge_type(input_type)].coo())
            num = index.size(1)
            for name, value in (("edge_label", edge_label), ("edge_label_time", edge_label_time)):
                if value is not None and value.size(0) != num:
                    raise ValueError(f"{name} has {value.size(0)} entries for {num} edges")
            if neg_sampling is None and ratio is not None:
                neg_sampling = NegativeSampling("binary", ratio)
            neg_sampling = _negative(neg_sampling)
            if neg_sampling is not None:
                check_ratio("neg_sampling amount", neg_sampling.amount)
        except LOCAL_ERRORS as exc:
            return cls("link", error=exc)
        return cls("link", input_type or graph.meta.edge_types[0], num, neg_sampling,
                   index=index, label=edge_label, time=edge_label_time,
                   all_stored=all_stored, hetero=graph.is_hetero)

    def translate(self, table: PartIds, data: Stores, ctx: DistContext) -> None:
        edge_type = table.meta.edge_type(self.input_type)
        if self.all_stored:
            self.part_index = self.index
            self.index = stored_edges(data, ctx, edge_type)[:2]
            return
        src_type, _, dst_type = edge_type
        if src_type == dst_type:
            both = to_relabelled({src_type: self.index.reshape(-1)}, table, ctx,
                                 "edge_label_index")[src_type]
            self.part_index = both.view(2, -1)
        else:
            got = to_relabelled({src_type: self.index[0], dst_type: self.index[1]}, table,
                                ctx, "edge_label_index")
            self.part_index = torch.stack([got[src_type], got[dst_type]])

    def inputs(self, positions: Tensor) -> EdgeSamplerInput:
        pick = lambda t: t[positions] if t is not None else None  # noqa: E731
        return EdgeSamplerInput(input_id=positions, row=self.part_index[0, positions],
                                col=self.part_index[1, positions], label=pick(self.label),
                                time=pick(self.time),
                                input_type=self.input_type if self.hetero else None)

    @property
    def seed_ids(self) -> Tensor:
        return self.index


class DistLinkNeighborLoader(DistLoader):
    """Link-level minibatches (with optional negative sampling), as ``Data``/``HeteroData``.

    Accepts what PyG's ``LinkNeighborLoader`` accepts, plus the distributed arguments
    of :class:`~pyg_dist.DistNeighborLoader`.

    Args:
        data: ``(feature_store, graph_store)`` of this rank's partition.
        num_neighbors: fan-out per hop.
        edge_label_index: seed edges ``[2, E]`` (original node ids), ``(edge_type, index)``,
            an edge type, or ``None`` (every edge this partition stores).
        edge_label: labels of the seed edges.
        edge_label_time: times of the seed edges (temporal sampling).
        neg_sampling: ``NegativeSampling``, ``"binary"``/``"triplet"`` or its kwargs;
            ``neg_sampling_ratio`` is PyG's older shorthand for binary negatives.
        neighbor_sampler (DistNeighborSampler, optional): the sampler to use, as in
            PyG's ``LinkNeighborLoader`` (see :class:`~pyg_dist.DistNeighborLoader`).
        **options: the shared loader options of
            :class:`~pyg_dist.loader._base.DistLoader`.
    """

    def __init__(self, data: Tuple[LocalFeatureStore, LocalGraphStore],
                 num_neighbors: Optional[NumNeighbors] = None,
                 edge_label_index: EdgeLabelIndex = None,
                 edge_label: Optional[Tensor] = None, edge_label_time: Optional[Tensor] = None,
                 neg_sampling: Union[None, str, Dict, NegativeSampling] = None,
                 neg_sampling_ratio: Optional[float] = None,
                 neighbor_sampler: Optional[DistNeighborSampler] = None,
                 **options: Any) -> None:
        time_attr = neighbor_sampler.config.time_attr if isinstance(
            neighbor_sampler, DistNeighborSampler) else options.get("time_attr")
        data = served_data(data, options)  # stores built in memory: their partition
        seeds = LinkInput.resolve(unpack_stores(data)[1], edge_label_index, edge_label,
                                  edge_label_time, neg_sampling, neg_sampling_ratio, time_attr)
        super().__init__(data, num_neighbors, seeds, neighbor_sampler=neighbor_sampler,
                         **options)

    @property
    def input_type(self) -> Optional[EdgeType]:
        """The edge type of the seeds (``None``: a homogeneous graph)."""
        return self.seeds.input_type if self.seeds.hetero else None

    @property
    def edge_label_index(self) -> Tensor:
        """The seed edges ``[2, E]`` as original node ids."""
        return self.seeds.index

    @property
    def part_edge_label_index(self) -> Tensor:
        """The seed edges as pyg_dist's relabelled node ids (what the sampler works in)."""
        return self.seeds.part_index

    @property
    def edge_label(self) -> Optional[Tensor]:
        """Labels of the seed edges, or ``None``."""
        return self.seeds.label

    @property
    def edge_label_time(self) -> Optional[Tensor]:
        """Times of the seed edges, or ``None``."""
        return self.seeds.time
