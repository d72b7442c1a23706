"""Dataclasses passed between sampling stages and over RPC."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from torch import Tensor

from pyg_dist._typing import EdgeType, NodeType, edge_key

TEMPORAL_STRATEGIES = ("uniform", "last")
SAMPLING_STRATEGIES = ("neighbor", "labor")
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
NumNeighbors = Union[Sequence[int], Dict[EdgeType, Sequence[int]]]
#: the largest fan-out (beyond every degree without replacement: all neighbours, as -1)
MAX_FANOUT = 2**31 - 1
#: the largest fan-out with replacement (it draws that many neighbours per node and hop)
MAX_DRAWS = 2**20


@dataclass(frozen=True)
class SamplingConfig:
    """What to sample: fan-outs per edge type and hop, and how.

    Args:
        num_neighbors: fan-out per hop per edge type (``-1`` = all neighbours,
            ``0`` = none). Edge types are ``(src, rel, dst)``: ``src`` neighbours of
            ``dst`` nodes are sampled over their in-edges.
        replace: sample with replacement.
        disjoint: every seed gets its own subtree (nodes repeat across subtrees).
        temporal_strategy: ``"uniform"`` or ``"last"``: the ``min(fanout, eligible)``
            most recent neighbours; with ``replace``, ``fanout`` draws among those
            (as pyg-lib does).
        time_attr: node or edge attribute holding time; sampled neighbours are never
            newer than their seed. Implies ``disjoint``.
        weight_attr: edge attribute of sampling weights (zero = never sampled).
        subgraph_type: ``"directional"``; ``"bidirectional"``, every sampled edge also
            reversed (:mod:`pyg_dist.sampler._bidirectional`); ``"induced"``, every edge
            between the sampled nodes (:mod:`pyg_dist.sampler._induced`).
        sampling_strategy: ``"neighbor"`` (independent draws per seed) or ``"labor"``
            (layer-neighbour sampling, :mod:`pyg_dist.sampler._labor`).
        layer_dependency: with ``"labor"``, one variate per vertex for all layers.
    """
    num_neighbors: Dict[EdgeType, List[int]]
    replace: bool = False
    disjoint: bool = False
    temporal_strategy: str = "uniform"
    time_attr: Optional[str] = None
    weight_attr: Optional[str] = None
    subgraph_type: str = "directional"
    sampling_strategy: str = "neighbor"
    layer_dependency: bool = False

    @property
    def num_hops(self) -> int:
        return len(next(iter(self.num_neighbors.values())))

    @classmethod
    def build(cls, num_neighbors: NumNeighbors, edge_types: Sequence[EdgeType],
              **kwargs: object) -> "SamplingConfig":
        """Normalises ``num_neighbors`` (a list for every edge type, or a dict) and checks it."""
        if not isinstance(num_neighbors, (dict, list, tuple)):
            raise TypeError(f"num_neighbors must be a list of fan-outs (one per hop) or a dict "
                            f"of such lists by edge type, got {type(num_neighbors).__name__} "
                            f"{str(num_neighbors)[:60]}")
        if isinstance(num_neighbors, dict):
            unknown = [k for k in num_neighbors if tuple(k) not in set(edge_types)]
            if unknown:
                raise ValueError(f"num_neighbors names unknown edge type(s) {unknown} "
                                 f"(edge types: {[edge_key(t) for t in edge_types]})")
            lengths = {len(v) for v in num_neighbors.values()}
            if len(lengths) != 1:
                raise ValueError(f"every num_neighbors list must have the same length (one "
                                 f"entry per hop), got lengths {sorted(lengths)}")
            hops = lengths.pop()
            fanouts = {t: [_fanout(x) for x in num_neighbors.get(t, [0] * hops)]  # type: ignore
                       for t in edge_types}
        else:
            fanouts = {t: [_fanout(x) for x in num_neighbors] for t in edge_types}
        hops = len(next(iter(fanouts.values())))
        if hops == 0:
            raise ValueError("num_neighbors must have at least one hop")
        bad = [v for f in fanouts.values() for v in f if v < -1]
        if bad:
            raise ValueError(f"fan-outs must be -1 (all) or >= 0, got {bad[0]}")
        _check_bound(fanouts, bool(kwargs.get("replace", False)))
        config = cls(fanouts, **kwargs)  # type: ignore[arg-type]
        config.validate()
        return config

    def validate(self) -> None:
        if self.temporal_strategy not in TEMPORAL_STRATEGIES:
            raise ValueError(f"temporal_strategy must be one of {TEMPORAL_STRATEGIES}, "
                             f"got {self.temporal_strategy!r}")
        if self.time_attr is not None and self.weight_attr is not None:
            raise NotImplementedError("weighted temporal sampling is not supported")
        if self.subgraph_type not in SUBGRAPH_TYPES:
            raise NotImplementedError(f"subgraph_type={self.subgraph_type!r} is not supported "
                                      f"(only {', '.join(map(repr, SUBGRAPH_TYPES))})")
        self._validate_strategy()
        if self.subgraph_type == "induced" and self.disjoint:
            raise NotImplementedError("subgraph_type='induced' is not supported with disjoint "
                                      "or temporal sampling")

    def _validate_strategy(self) -> None:
        if self.sampling_strategy not in SAMPLING_STRATEGIES:
            raise ValueError(f"sampling_strategy must be one of {SAMPLING_STRATEGIES}, "
                             f"got {self.sampling_strategy!r}")
        if not isinstance(self.layer_dependency, bool):
            raise TypeError(f"layer_dependency must be True or False, got "
                            f"{self.layer_dependency!r}")
        if self.sampling_strategy != "labor":
            if self.layer_dependency:
                raise ValueError("layer_dependency=True needs sampling_strategy='labor'")
            return
        for name, used in (("time_attr (temporal sampling)", self.time_attr is not None),
                           ("disjoint=True", self.disjoint), ("replace=True", self.replace)):
            if used:
                raise NotImplementedError(f"sampling_strategy='labor' is not supported with "
                                          f"{name}; use sampling_strategy='neighbor'")

    @property
    def is_labor(self) -> bool:
        return self.sampling_strategy == "labor"

    @property
    def is_temporal(self) -> bool:
        return self.time_attr is not None


def _check_bound(fanouts: Dict[EdgeType, List[int]], replace: bool) -> None:
    """Fan-outs are at most :data:`MAX_FANOUT` (:data:`MAX_DRAWS` with replacement,
    where every one is drawn and held): the arrays a hop fills are sized by them."""
    bound = MAX_DRAWS if replace else MAX_FANOUT
    big = [v for f in fanouts.values() for v in f if v > bound]
    if big:
        hint = " with replace=True (each is a draw held in memory)" if replace else \
            " (-1 takes all neighbours)"
        raise ValueError(f"fan-out {big[0]} in num_neighbors is too large: at most {bound} "
                         f"neighbours per node and hop{hint}")


def _fanout(value: object) -> int:
    """An integer fan-out; floats (even 10.0), bools and strings are refused, never
    truncated."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) and not (
            isinstance(value, Tensor) and value.dim() == 0 and not value.is_floating_point()):
        raise TypeError(f"fan-outs in num_neighbors must be integers, got {value!r} "
                        f"({type(value).__name__})")
    return int(value)  # type: ignore[arg-type]


@dataclass
class HopRequest:
    """One partition's share of one hop, for every edge type at once (one RPC).

    ``seeds[i]`` are global ids of ``edge_types[i][2]`` nodes owned by the receiver;
    with ``original_eids`` the owner also sends the sampled edges' original ids (it
    reads them next to the edges it samples: no request of their own).
    """
    edge_types: List[EdgeType]
    seeds: List[Tensor]
    fanouts: List[int]
    seed_time: List[Optional[Tensor]]
    replace: bool
    temporal_strategy: str
    time_attr: Optional[str]
    weight_attr: Optional[str]
    rng_seed: int
    original_eids: bool = False
    #: LABOR sampling: the layer's seed (:func:`~pyg_dist.sampler._labor.hop_seed`);
    #: ``None``: neighbour sampling
    labor_seed: Optional[int] = None


@dataclass
class HopResponse:
    """Per edge type of the request: neighbours per seed, their global ids and edge ids
    (and the edges' original ids, when the request asked for them)."""
    counts: List[Tensor]
    nbrs: List[Tensor]
    eids: List[Tensor]
    original_eids: List[Tensor] = field(default_factory=list)


@dataclass
class FeatureRequest:
    """Attributes to read for owned ids: node types and edge types, all at once."""
    nodes: Dict[NodeType, Tensor] = field(default_factory=dict)
    edges: Dict[EdgeType, Tensor] = field(default_factory=dict)
    node_attrs: Dict[NodeType, List[str]] = field(default_factory=dict)
    edge_attrs: Dict[EdgeType, List[str]] = field(default_factory=dict)
    # attributes to send as another type (pyg_dist.sampler._wire): type -> attr -> name
    node_wire: Dict[NodeType, Dict[str, str]] = field(default_factory=dict)
    edge_wire: Dict[EdgeType, Dict[str, str]] = field(default_factory=dict)


@dataclass
class FeatureResponse:
    nodes: Dict[NodeType, Dict[str, Tensor]] = field(default_factory=dict)
    edges: Dict[EdgeType, Dict[str, Tensor]] = field(default_factory=dict)


@dataclass
class SampledSubgraph:
    """The sampled computation graph, ids relabelled (PyG's ``SamplerOutput`` fields).

    ``node[t]`` are global ids (seeds first); ``row[e]``/``col[e]`` index
    ``node[e[0]]``/``node[e[2]]``; ``edge[e]`` are global edge ids and
    ``original_edge[e]`` their original ids (``None`` unless the sampler asked owners
    for them).
    """
    node: Dict[NodeType, Tensor]
    row: Dict[EdgeType, Tensor]
    col: Dict[EdgeType, Tensor]
    edge: Dict[EdgeType, Tensor]
    batch: Optional[Dict[NodeType, Tensor]]
    num_sampled_nodes: Dict[NodeType, List[int]]
    num_sampled_edges: Dict[EdgeType, List[int]]
    original_edge: Optional[Dict[EdgeType, Tensor]] = None


@dataclass
class NodeSeeds:
    """What a node-level batch was sampled for (seeds are first in ``node[input_type]``).

    Args:
        input_type: the seeds' node type.
        input_id: positions of the seeds in the loader's ``input_nodes``.
        seed_time: time of each seed (temporal sampling).
        repeated: some seed is given more than once (kept in its place, as PyG does:
            node and edge ids repeat in the subgraph).
    """
    input_type: NodeType
    input_id: Tensor
    seed_time: Optional[Tensor] = None
    repeated: bool = False

    @property
    def pyg_metadata(self) -> tuple:
        """PyG's positional ``metadata`` of a sampler output for these seeds."""
        return (self.input_id, self.seed_time)


@dataclass
class LinkSeeds:
    """What a link-level batch was sampled for; indices point into the sampled node
    lists of the edge type's source / destination node types.

    Args:
        input_type: the seed edges' type.
        input_id: positions of the seed edges in the loader's ``edge_label_index``.
        edge_label_index: ``[2, E]`` label edges, negatives after positives (binary
            negatives, or none).
        edge_label: their labels (binary negatives: ``0``).
        edge_label_time: their times (temporal sampling).
        src_index, dst_pos_index, dst_neg_index: the triplet layout instead.
        src_time: time of each source (triplet, temporal sampling).
    """
    input_type: EdgeType
    input_id: Tensor
    edge_label_index: Optional[Tensor] = None
    edge_label: Optional[Tensor] = None
    edge_label_time: Optional[Tensor] = None
    src_index: Optional[Tensor] = None
    dst_pos_index: Optional[Tensor] = None
    dst_neg_index: Optional[Tensor] = None
    src_time: Optional[Tensor] = None

    @property
    def is_triplet(self) -> bool:
        return self.src_index is not None

    @property
    def pyg_metadata(self) -> tuple:
        """PyG's positional ``metadata`` of a sampler output for these seeds."""
        if self.is_triplet:
            return (self.input_id, self.src_index, self.dst_pos_index, self.dst_neg_index,
                    self.src_time)
        return (self.input_id, self.edge_label_index, self.edge_label, self.edge_label_time)


@dataclass
class SampledBatch:
    """One batch as the sampler hands it to collate: the subgraph and what it was
    sampled for."""
    subgraph: SampledSubgraph
    seeds: Union[NodeSeeds, LinkSeeds]
