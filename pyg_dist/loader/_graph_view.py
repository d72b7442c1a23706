"""``DistGraph``: the whole partitioned graph, seen from one rank, in original ids.

DGL's ``DistGraph`` for pyg_dist: inside a job, one object answers for every node and
edge of the graph whatever partition owns it, in the dataset's **original** ids
(:mod:`pyg_dist.store._original_ids`). It is a PyG ``FeatureStore`` (read-only), so PyG code
that only reads features (``view['paper', 'x', ids]``, ``view.get_tensor(...)``,
``multi_get_tensor``) runs on it.

How each answer is found (no whole-graph table anywhere):

1. original -> relabelled: ids this partition owns are looked up in its mapped id
   table; the rest are asked of every other partition at once (``graph.find_ids``,
   one request per partition, all in flight), each answering for what it owns
   (:mod:`pyg_dist.sampler._id_lookup`);
2. then one request per owner, through the helpers the samplers use: rows with
   :class:`~pyg_dist.sampler._features.FeatureFetcher` (split by owner, remote first,
   local rows meanwhile), hops with :class:`~pyg_dist.DistNeighborSampler`, and the
   callees of :mod:`pyg_dist.loader._graph_serving` for degrees and edge ends;
3. relabelled -> original: owners send original ids as one more column of their rows.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from pyg_dist.loader import _graph_serving as graph_serving
from pyg_dist.sampler._id_lookup import check_answer, relabel
from pyg_dist.rpc._context import DistContext, check_context
from pyg_dist.rpc._routing import fan_out, split_by_owner
from pyg_dist.sampler import _direct as direct
from pyg_dist.sampler._features import FeatureFetcher
from pyg_dist.store._original_ids import ID_ATTR
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
from pyg_dist.sampler._stores import unpack_stores
from pyg_dist.sampler._serving import serving_group
from pyg_dist.sampler._types import NumNeighbors
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._original_ids import Group, PartIds, check_ids
from pyg_dist._typing import EdgeType, NodeType, edge_key

Seeds = Union[Tensor, Dict[NodeType, Tensor]]


class DistGraph(FeatureStore):
    """The whole partitioned graph, in original ids, from any rank of a job.

    Creating it is collective the first time this process serves its partition (as
    for a loader); after that every method is an ordinary call on one rank (its peers
    answer over RPC without taking part). Ids in and out are the dataset's original
    ids; ``None`` names the one node or edge type of a homogeneous graph.

    Args:
        data: ``(feature_store, graph_store)`` of this rank's partition.
        current_ctx (DistContext, optional): this process's context (default: from
            torchrun's environment).
    """

    def __init__(self, data: Tuple[LocalFeatureStore, LocalGraphStore],
                 current_ctx: Optional[DistContext] = None) -> None:
        super().__init__()
        features, graph = unpack_stores(data)
        self.features, self.graph, self.meta = features, graph, graph.meta
        self.group, self.local = serving_group(check_context(current_ctx), features, graph)
        self.ids = PartIds.of_stores(features, graph)
        self._fetchers: Dict[Tuple[Tuple[Tuple[Group, Tuple[str, ...]], ...], ...],
                             FeatureFetcher] = {}
        self._samplers: Dict[str, DistNeighborSampler] = {}

    # ---- sizes -------------------------------------------------------------------------
    @property
    def is_hetero(self) -> bool:
        return self.meta.is_hetero

    @property
    def node_types(self) -> List[NodeType]:
        return list(self.meta.node_types)

    @property
    def edge_types(self) -> List[EdgeType]:
        return list(self.meta.edge_types)

    def num_nodes(self, node_type: Optional[NodeType] = None) -> int:
        """Nodes of ``node_type`` in the whole graph (``None``: all nodes)."""
        if node_type is None:
            return sum(self.meta.num_nodes.values())
        return self.meta.num_nodes[self.meta.node_type(node_type)]

    def num_edges(self, edge_type: Optional[EdgeType] = None) -> int:
        """Edges of ``edge_type`` in the whole graph (``None``: all edges)."""
        if edge_type is None:
            return sum(self.meta.num_edges.values())
        return self.meta.num_edges[self.meta.edge_type(edge_type)]

    # ---- id translation ----------------------------------------------------------------
    def relabelled(self, kind: str, group: Group, ids: object, argument: str = "ids"
                   ) -> Tensor:
        """Relabelled (internal) ids of original node (``kind="node"``) or edge ids of
        ``group``, any owner: owned ones from this partition's table, the rest asked of
        every other partition in one round trip.

        Raises:
            TypeError, ValueError: naming ``argument``, for ids that are not integers
                in range.
        """
        total = self.meta.num_nodes[group] if kind == "node" else self.meta.num_edges[group]
        what = f"node type '{group}'" if kind == "node" else f"edge type {edge_key(group)}"
        ids = check_ids(ids, total, argument, what)
        found = self._run(relabel(self.group, self.ids, kind, group, ids))
        if bool((found < 0).any()):
            raise ValueError(f"{argument}: original ids {ids[found < 0][:5].tolist()} of "
                             f"{what} are in no partition (a damaged partition folder)")
        return found

    def original(self, kind: str, group: Group, relabelled: Tensor) -> Tensor:
        """Original ids of relabelled node or edge ids of ``group`` (any owner): one
        request per owner, the ids coming as a column of their rows."""
        nodes = {group: relabelled.reshape(-1)} if kind == "node" else {}
        edges = {group: relabelled.reshape(-1)} if kind == "edge" else {}
        got = self._fetch(nodes, edges, [ID_ATTR])
        rows = (got.nodes if kind == "node" else got.edges)[group][ID_ATTR]
        return rows.view(relabelled.shape)

    # ---- features: PyG's FeatureStore, read-only ---------------------------------------
    def _fetch(self, nodes: Dict[Group, Tensor], edges: Dict[Group, Tensor],
               attrs: List[str]) -> object:
        key = (tuple((g, tuple(attrs)) for g in nodes), tuple((g, tuple(attrs)) for g in edges))
        if key not in self._fetchers:
            self._fetchers[key] = FeatureFetcher(self.group, self.local, self.meta,
                                                 node_attrs={g: attrs for g in nodes},
                                                 edge_attrs={g: attrs for g in edges})
        return self._run(self._fetchers[key].fetch(nodes, edges, unique=True))

    def _group(self, attr: TensorAttr) -> Group:
        return self.features.resolve(attr.group_name, attr.attr_name)

    def _stored(self, group: Group, attr_name: str) -> bool:
        specs = self.meta.edge_attrs if isinstance(group, tuple) else self.meta.node_attrs
        return attr_name in specs.get(group, {}) or self.features.has(group, attr_name)

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        """Rows of original ids ``attr.index`` (tensor, list or slice; ``None``: every
        row of the whole graph), fetched from their owners."""
        group = self._group(attr)
        if not self._stored(group, attr.attr_name):
            return None
        kind = "edge" if isinstance(group, tuple) else "node"
        total = self.meta.num_edges[group] if kind == "edge" else self.meta.num_nodes[group]
        index = attr.index
        if index is None:
            index = torch.arange(total)
        elif isinstance(index, slice):
            index = torch.arange(total)[index]
        rel = self.relabelled(kind, group, index, "index")
        flat = rel.reshape(-1)
        got = self._fetch({group: flat} if kind == "node" else {},
                          {group: flat} if kind == "edge" else {}, [attr.attr_name])
        rows = (got.nodes if kind == "node" else got.edges)[group][attr.attr_name]
        return rows.view(*rel.shape, *rows.shape[1:])

    def _put_tensor(self, tensor: Tensor, attr: TensorAttr) -> bool:
        raise NotImplementedError("DistGraph is a read-only view of the partitioned graph: "
                                  "write rows with put_tensor on the owner's LocalFeatureStore")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise NotImplementedError("DistGraph is a read-only view of the partitioned graph")

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[Tuple[int, ...]]:
        group = self._group(attr)
        if not self._stored(group, attr.attr_name):
            return None
        shape, _ = self._layout(group, attr.attr_name)
        total = self.meta.num_edges[group] if isinstance(group, tuple) else \
            self.meta.num_nodes[group]
        return (total, *shape)

    def _layout(self, group: Group, attr_name: str) -> Tuple[Tuple[int, ...], torch.dtype]:
        if self.features.has(group, attr_name):
            t = self.features.tensor(group, attr_name)
            return tuple(t.shape[1:]), t.dtype
        specs = self.meta.edge_attrs if isinstance(group, tuple) else self.meta.node_attrs
        spec = specs[group][attr_name]
        return tuple(spec.shape), getattr(torch, spec.dtype)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        """Every attribute of the graph (as PyG names groups: ``None`` for a
        homogeneous graph's nodes)."""
        out = []
        for specs in (self.meta.node_attrs, self.meta.edge_attrs):
            for group, attrs in specs.items():
                name = group if self.is_hetero or isinstance(group, tuple) else None
                out += [TensorAttr(name, a, None) for a in sorted(attrs)]
        return out

    # ---- structure ---------------------------------------------------------------------
    def in_degrees(self, ids: Optional[object] = None,
                   edge_type: Optional[EdgeType] = None) -> Tensor:
        """In-degrees over ``edge_type`` of original destination node ids (``None``:
        every node of the destination type), asked of each node's owner."""
        edge_type = self.meta.edge_type(edge_type)
        rel = self._node_ids(ids, edge_type[2])
        book = self.meta.node_book(edge_type[2])
        out = torch.empty_like(rel)
        flat = rel.reshape(-1)
        self._by_owner(flat, book.offsets, "graph.degrees",
                       lambda pos: (edge_type, flat[pos], "in"), out.view(-1), 0)
        return out

    def out_degrees(self, ids: Optional[object] = None,
                    edge_type: Optional[EdgeType] = None) -> Tensor:
        """Out-degrees over ``edge_type`` of original source node ids (``None``: every
        node of the source type); every partition counts the edges it stores."""
        edge_type = self.meta.edge_type(edge_type)
        flat = self._node_ids(ids, edge_type[0]).reshape(-1)
        total = torch.zeros_like(flat)
        bound = self.meta.num_edges[edge_type] + 1

        def add(part: int, got: object) -> None:
            where = f"'graph.degrees' on partition {part}"
            total.add_(check_answer(got, tuple(flat.shape), 0, bound, where))

        async def ask() -> None:
            requests = [(p, direct.call_async(self.group, self.group.route(p), "graph.degrees",
                                              edge_type, flat, "out"))
                        for p in range(self.meta.num_parts)]
            await fan_out(requests, None, add)

        self._run(ask())
        shape = ids.shape if isinstance(ids, Tensor) else flat.shape
        return total.view(shape)

    def find_edges(self, eids: object, edge_type: Optional[EdgeType] = None
                   ) -> Tuple[Tensor, Tensor]:
        """Original ``(src, dst)`` node ids of original edge ids ``eids``."""
        edge_type = self.meta.edge_type(edge_type)
        rel = self.relabelled("edge", edge_type, eids, "eids").reshape(-1)
        ends = torch.empty((2, rel.numel()), dtype=torch.long)
        book = self.meta.edge_book(edge_type)
        bound = max(self.meta.num_nodes[edge_type[0]], self.meta.num_nodes[edge_type[2]])
        self._by_owner(rel, book.offsets, "graph.edge_ends", lambda pos: (edge_type, rel[pos]),
                       ends, bound, columns=True)
        src = self.original("node", edge_type[0], ends[0])
        dst = self.original("node", edge_type[2], ends[1])
        return src, dst

    def _node_ids(self, ids: Optional[object], node_type: NodeType) -> Tensor:
        if ids is None:
            ids = torch.arange(self.meta.num_nodes[node_type])
        return self.relabelled("node", node_type, ids, "ids")

    def _by_owner(self, ids: Tensor, offsets: List[int], name: str, args, out: Tensor,
                  bound: int, columns: bool = False) -> None:
        """Calls ``name(*args(positions))`` on the owner of each share of ``ids`` (the
        local share in this process) and writes each answer to its positions of ``out``
        (along dim 1 when ``columns``); answers must lie in ``[0, bound)`` (``0``: no
        upper bound is known beyond non-negative)."""
        owners = split_by_owner(ids, offsets, name)

        def put(pos: Tensor, got: object) -> None:
            shape = (2, pos.numel()) if columns else (pos.numel(),)
            got = check_answer(got, shape, 0, bound or (1 << 62), f"'{name}'")
            if columns:
                out[:, pos] = got
            else:
                out[pos] = got

        async def ask() -> None:
            requests = [(pos, direct.call_async(self.group, self.group.route(p), name,
                                                *args(pos)))
                        for p, pos in owners]
            await fan_out(requests, None, put)

        self._run(ask())

    # ---- sampling ----------------------------------------------------------------------
    def sample_neighbors(self, seeds: Seeds, fanout: Union[int, NumNeighbors],
                         replace: bool = False) -> Union[SamplerOutput, HeteroSamplerOutput]:
        """Samples the in-neighbourhood of original node ids ``seeds`` (a tensor for a
        homogeneous graph, else a dict by node type), with the samplers' hop machinery.

        Args:
            seeds: original ids; repeats are sampled once (as their first occurrence).
            fanout: neighbours per seed: an ``int`` (one hop), a list (one entry per
                hop) or a dict of lists by edge type, as ``num_neighbors``; ``-1``
                takes all.
            replace (bool): sample with replacement.

        Returns:
            PyG's ``SamplerOutput`` (``HeteroSamplerOutput``): ``node`` and ``edge`` hold
            **original** ids, seeds first in ``node``; ``row``/``col`` index ``node``.
        """
        if isinstance(fanout, bool) or not isinstance(fanout, (int, list, tuple, dict)):
            raise TypeError(f"fanout must be an int, a list of ints or a dict by edge type, "
                            f"got {type(fanout).__name__}")
        fanout = [fanout] if isinstance(fanout, int) else fanout
        if isinstance(seeds, dict):
            typed = {self.meta.node_type(t): s for t, s in seeds.items()}
        else:
            typed = {self.meta.node_type(None): seeds}
        rel = {t: _first_occurrences(self.relabelled("node", t, s, "seeds").reshape(-1))
               for t, s in typed.items()}
        sampler = self._sampler(fanout, replace)
        sub = self._run(sampler.sample_subgraph(rel))
        got = self._fetch_ids(sub.node)
        node = {t: got.nodes[t][ID_ATTR] if t in got.nodes else v for t, v in sub.node.items()}
        edge = sub.original_edge  # sent by the owners with each hop
        if not self.is_hetero:
            (nt, n), (et, e) = next(iter(node.items())), next(iter(edge.items()))
            return SamplerOutput(node=n, row=sub.row[et], col=sub.col[et], edge=e,
                                 num_sampled_nodes=sub.num_sampled_nodes[nt],
                                 num_sampled_edges=sub.num_sampled_edges[et])
        return HeteroSamplerOutput(node=node, row=sub.row, col=sub.col, edge=edge,
                                   num_sampled_nodes=sub.num_sampled_nodes,
                                   num_sampled_edges=sub.num_sampled_edges)

    def _fetch_ids(self, nodes: Dict[NodeType, Tensor]) -> object:
        return self._fetch({t: v for t, v in nodes.items() if v.numel()}, {}, [ID_ATTR])

    def _sampler(self, fanout: NumNeighbors, replace: bool) -> DistNeighborSampler:
        key = repr((fanout, replace))
        if key not in self._samplers:
            self._samplers[key] = DistNeighborSampler((self.features, self.graph), fanout,
                                                      current_ctx=self.group.ctx,
                                                      replace=replace)
        return self._samplers[key]

    # ---- plumbing ----------------------------------------------------------------------
    def _run(self, coro: object) -> object:
        return self.group.loop.run(coro, timeout=self.group.ctx.rpc_timeout + 5)

    def __repr__(self) -> str:
        return (f"DistGraph(parts={self.meta.num_parts}, nodes={dict(self.meta.num_nodes)}, "
                f"edges={ {edge_key(t): n for t, n in self.meta.num_edges.items()} }, "
                f"rank={self.group.rank})")


def _first_occurrences(ids: Tensor) -> Tensor:
    """``ids`` without repeats, each at its first occurrence, in order."""
    uniq, inverse = torch.unique(ids, return_inverse=True)
    if uniq.numel() == ids.numel():
        return ids
    first = torch.full((uniq.numel(),), ids.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(ids.numel()), reduce="amin")
    return ids[torch.sort(first).values]
