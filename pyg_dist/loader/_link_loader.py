"""``DistLinkNeighborLoader``: PyG's ``LinkNeighborLoader`` over a partitioned graph."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

from pyg_dist.loader._arguments import check_pair, check_ratio, check_tensor
from pyg_dist.loader._base import DistLoader, LoaderSeeds
from pyg_dist.loader._id_collective import to_relabelled
from pyg_dist.loader._node_loader import as_id_tensor
from pyg_dist.loader._seeds import stored_edges
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
        **options: the shared loader options of
            :class:`~pyg_dist.loader._base.DistLoader`.
    """

    def __init__(self, data: Tuple[LocalFeatureStore, LocalGraphStore],
                 num_neighbors: NumNeighbors, edge_label_index: EdgeLabelIndex = None,
                 edge_label: Optional[Tensor] = None, edge_label_time: Optional[Tensor] = None,
                 neg_sampling: Union[None, str, Dict, NegativeSampling] = None,
                 neg_sampling_ratio: Optional[float] = None, **options: Any) -> None:
        self._args = (edge_label_index, edge_label, edge_label_time, neg_sampling,
                      neg_sampling_ratio)
        self._time_attr = options.get("time_attr")
        super().__init__(data, num_neighbors, **options)

    def _resolve(self, graph: LocalGraphStore) -> LoaderSeeds:
        edge_label_index, edge_label, edge_label_time, neg_sampling, ratio = self._args
        check_tensor("edge_label", edge_label)
        check_tensor("edge_label_time", edge_label_time)
        check_ratio("neg_sampling_ratio", ratio)
        check_pair("edge_label_time", edge_label_time, self._time_attr)
        self.input_type, index = resolve_edge_label_index(graph, edge_label_index)
        edge_type = graph.meta.edge_type(self.input_type)
        #: every stored edge (``edge_label_index=None``): found by edge_split, collectively
        self._all_stored = index is None
        self.edge_label_index = torch.stack(graph.csc_by_type[edge_type].coo()) if index is None \
            else index
        num = self.edge_label_index.size(1)
        for name, value in (("edge_label", edge_label), ("edge_label_time", edge_label_time)):
            if value is not None and value.size(0) != num:
                raise ValueError(f"{name} has {value.size(0)} entries for {num} edges")
        if neg_sampling is None and ratio is not None:
            neg_sampling = NegativeSampling("binary", ratio)
        self.edge_label, self.edge_label_time = edge_label, edge_label_time
        neg_sampling = _negative(neg_sampling)
        if neg_sampling is not None:
            check_ratio("neg_sampling amount", neg_sampling.amount)
        return LoaderSeeds("link", self.input_type or graph.meta.edge_types[0], num,
                           neg_sampling)

    def _translate(self, table: PartIds) -> None:
        edge_type = self.graph.meta.edge_type(self.input_type)
        if self._all_stored:  # relabelled as stored; the user sees original ids
            self.part_edge_label_index = self.edge_label_index
            self.edge_label_index = stored_edges((self.features, self.graph), self.ctx,
                                                 edge_type)[:2]
            return
        src_type, _, dst_type = edge_type
        index = self.edge_label_index
        if src_type == dst_type:
            both = to_relabelled({src_type: index.reshape(-1)}, table, self.ctx,
                                 "edge_label_index")[src_type]
            part = both.view(2, -1)
        else:
            got = to_relabelled({src_type: index[0], dst_type: index[1]}, table, self.ctx,
                                "edge_label_index")
            part = torch.stack([got[src_type], got[dst_type]])
        #: the seed edges as pyg_dist's relabelled node ids (what the sampler works in)
        self.part_edge_label_index = part

    def _seed_ids(self) -> Tensor:
        return self.edge_label_index

    def _inputs(self, positions: Tensor) -> EdgeSamplerInput:
        pick = lambda t: t[positions] if t is not None else None  # noqa: E731
        return EdgeSamplerInput(input_id=positions,
                                row=self.part_edge_label_index[0, positions],
                                col=self.part_edge_label_index[1, positions],
                                label=pick(self.edge_label), time=pick(self.edge_label_time),
                                input_type=self.input_type)
