"""``DistNeighborLoader``: PyG's ``NeighborLoader`` over a partitioned graph."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist.loader._arguments import check_pair, check_tensor
from pyg_dist.loader._base import DistLoader
from pyg_dist.loader._construction import served_data
from pyg_dist.loader._id_collective import check_labels, to_relabelled
from pyg_dist.loader._inputs import LOCAL_ERRORS, LoaderInput, Stores
from pyg_dist.rpc._context import DistContext
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
from pyg_dist.sampler._stores import unpack_stores
from pyg_dist.store._original_ids import PartIds, check_ids
from pyg_dist.sampler._types import NumNeighbors
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist._typing import NodeType

InputNodes = Union[None, NodeType, Tensor, Sequence[int], Tuple[NodeType, Optional[Tensor]]]


def resolve_input_nodes(graph: LocalGraphStore, input_nodes: InputNodes,
                        table: Optional[PartIds] = None) -> Tuple[Optional[NodeType], Tensor]:
    """``(node type or None, original seed ids)`` from PyG-style ``input_nodes``: original
    ids (a tensor, a list of ints or a boolean mask over all nodes in dataset order), a
    node type, ``(node_type, ids)``, or ``None`` (every node this partition owns; needs
    ``table``)."""
    node_type: Optional[NodeType] = None
    ids: Any = input_nodes
    if isinstance(input_nodes, str):
        node_type, ids = input_nodes, None
    elif isinstance(input_nodes, tuple) and len(input_nodes) == 2 and \
            isinstance(input_nodes[0], str):
        node_type, ids = input_nodes
    resolved = graph.meta.node_type(node_type)
    if ids is None:
        if table is None:
            raise ValueError("input_nodes=None (every owned node) needs the partition's ids")
        ids = table.table("node", resolved).to(torch.int64, copy=True)
    ids = as_id_tensor(ids, "input_nodes")
    if ids.dtype == torch.bool:
        if ids.numel() != graph.meta.num_nodes[resolved]:
            raise ValueError(f"a boolean input_nodes mask needs one entry per node "
                             f"({graph.meta.num_nodes[resolved]}), got {ids.numel()}")
        ids = ids.nonzero().view(-1)
    if ids.dtype not in (torch.int64, torch.int32) or ids.dim() != 1:
        raise TypeError(f"input_nodes must be a 1-d tensor of original node ids, got "
                        f"{ids.dtype} of shape {tuple(ids.shape)}")
    ids = check_ids(ids, graph.meta.num_nodes[resolved], "input_nodes")
    return (resolved if graph.is_hetero else None), ids


def as_id_tensor(ids: Any, name: str) -> Tensor:
    """A tensor from a tensor, numpy array or list of ints (never from floats)."""
    if isinstance(ids, Tensor):
        return ids
    try:
        out = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be integer ids (a tensor or list of ints), got "
                        f"{type(ids).__name__}: {exc}") from None
    return out.long() if out.numel() == 0 else out


@dataclass
class NodeInput(LoaderInput):
    """Seed nodes of a :class:`DistNeighborLoader` (see :class:`LoaderInput`).

    Args:
        nodes (Tensor): the seeds as original ids.
        time (Tensor, optional): seed times (temporal sampling).
        part_nodes (Tensor, optional): the seeds as relabelled ids (after
            :meth:`translate`).
    """
    nodes: Optional[Tensor] = None
    time: Optional[Tensor] = None
    part_nodes: Optional[Tensor] = None

    @classmethod
    def resolve(cls, data: Stores, input_nodes: InputNodes, input_time: Optional[Tensor],
                time_attr: Optional[str]) -> "NodeInput":
        """The seeds of PyG-style ``input_nodes``/``input_time`` (the error kept, not
        raised, on bad input)."""
        features, graph = data
        try:
            check_tensor("input_time", input_time)
            check_pair("input_time", input_time, time_attr)
            table = PartIds.of_stores(features, graph) if input_nodes is None or \
                features.labels is not None else None
            input_type, nodes = resolve_input_nodes(graph, input_nodes, table)
            if input_time is not None and input_time.numel() != nodes.numel():
                raise ValueError(f"input_time has {input_time.numel()} entries for "
                                 f"{nodes.numel()} input nodes")
            if features.labels is not None:
                check_labels(features.labels, table, graph.meta.node_type(input_type))
        except LOCAL_ERRORS as exc:
            return cls("node", error=exc)
        return cls("node", input_type, nodes.numel(), table=table, nodes=nodes,
                   time=input_time)

    def translate(self, table: PartIds, data: Stores, ctx: DistContext) -> None:
        node_type = table.meta.node_type(self.input_type)
        self.part_nodes = to_relabelled({node_type: self.nodes}, table, ctx,
                                        "input_nodes")[node_type]

    def inputs(self, positions: Tensor) -> NodeSamplerInput:
        time = self.time[positions] if self.time is not None else None
        return NodeSamplerInput(input_id=positions, node=self.part_nodes[positions],
                                time=time, input_type=self.input_type)

    @property
    def seed_ids(self) -> Tensor:
        return self.nodes


class DistNeighborLoader(DistLoader):
    """Node-level minibatches of sampled neighbourhoods, as ``Data``/``HeteroData``.

    Accepts what PyG's ``NeighborLoader`` accepts, plus the distributed arguments.
    Seeds are the dataset's original node ids (usually this rank's share from
    :func:`node_split`, or a PyG split file), and batches' ``n_id``/``e_id`` are original
    ids too (``part_n_id``/``part_e_id``: pyg_dist's relabelled ids); every
    rank yields the same number of batches per epoch unless ``even_batches=False``.
    Construction is collective: every rank builds its loaders in the same order.

    Args:
        data: ``(feature_store, graph_store)`` of this rank's partition.
        num_neighbors: fan-out per hop (list, or dict by edge type).
        input_nodes: seeds: original ids (tensor, list, or boolean mask over all nodes),
            ``(node_type, ids)``, a node type, or ``None`` (all nodes this partition owns).
        input_time: seed times (temporal sampling).
        neighbor_sampler (DistNeighborSampler, optional): the sampler to use, as in
            PyG's ``NeighborLoader``: built by the caller (e.g. a subclass, or one shared
            by several loaders) over the same ``data``. Its options decide the sampling;
            the loader's own sampling options may be left out (given, they must equal
            the sampler's). Sampling then runs in this process (``num_workers=0``).
            Default: the loader builds one from its options.
        **options: the shared loader options of
            :class:`~pyg_dist.loader._base.DistLoader` (``batch_size``, ``shuffle``,
            ``drop_last``, ``current_ctx``, ``num_workers``, ``concurrency``, ``device``,
            ``replace``, ``disjoint``, ``time_attr``, ``weight_attr``, ``transform``,
            ``even_batches``, ``seed``, ...).

    Example:
        >>> loader = DistNeighborLoader(data=(fs, gs), num_neighbors=[10, 5],
        ...                             input_nodes=ids, batch_size=16, current_ctx=ctx)
    """

    def __init__(self, data: Tuple[LocalFeatureStore, LocalGraphStore],
                 num_neighbors: Optional[NumNeighbors] = None, input_nodes: InputNodes = None,
                 input_time: Optional[Tensor] = None,
                 neighbor_sampler: Optional[DistNeighborSampler] = None,
                 **options: Any) -> None:
        time_attr = neighbor_sampler.config.time_attr if isinstance(
            neighbor_sampler, DistNeighborSampler) else options.get("time_attr")
        data = served_data(data, options)  # stores built in memory: their partition
        seeds = NodeInput.resolve(unpack_stores(data), input_nodes, input_time, time_attr)
        super().__init__(data, num_neighbors, seeds, neighbor_sampler=neighbor_sampler,
                         **options)

    @property
    def input_type(self) -> Optional[NodeType]:
        """The node type of the seeds (``None``: a homogeneous graph)."""
        return self.seeds.input_type

    @property
    def input_nodes(self) -> Tensor:
        """The seeds as original ids."""
        return self.seeds.nodes

    @property
    def input_time(self) -> Optional[Tensor]:
        """The seeds' times (temporal sampling), or ``None``."""
        return self.seeds.time

    @property
    def part_input_nodes(self) -> Tensor:
        """The seeds as pyg_dist's relabelled ids (what the sampler works in)."""
        return self.seeds.part_nodes
