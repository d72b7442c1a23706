"""The growing computation graph of one minibatch: dedupe, relabel, frontier, edges.

Pure bookkeeping (no RPC): the sampler feeds it each hop's neighbours and reads
the next frontier. In disjoint mode a node is identified by ``(subtree, id)``,
encoded as ``subtree << 40 | id`` so one hash map per node type serves both modes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.sampler._edge_columns import Column, repeat_into
from pyg_dist.sampler._node_index import NodeIndex, NodeIndexPool
from pyg_dist.sampler._runs import seed_runs, take_runs
from pyg_dist.sampler._types import HopRequest, HopResponse, SampledSubgraph
from pyg_dist._typing import EdgeType, NodeType

ID_BITS = 40
ID_MASK = (1 << ID_BITS) - 1

#: the largest fan-out whose room is reserved ahead (:meth:`HopState.spares`)
SPARE_MAX_FANOUT = 1 << 12


@dataclass
class EdgePiece:
    """One partition's edges of one edge type in one hop."""
    col: Optional[Tensor]   # destination of each edge (position in its type's node list;
                            # None: found from seeds and counts when needed)
    nbrs: Tensor            # neighbour (source) of each edge, global id
    eids: Tensor            # edge ids
    batch: Optional[Tensor]     # subtree of each edge's destination (disjoint mode)
    original: Optional[Tensor]  # the edges' original ids (when recorded)
    seeds: Tensor           # the piece's destinations, ascending, each once
    counts: Tensor          # edges per destination


@dataclass
class Frontier:
    """Nodes of one type added in the previous hop."""
    ids: Tensor          # global ids
    local: Tensor        # positions in the type's node list
    batch: Optional[Tensor]  # subtree of each node (disjoint mode)
    time: Optional[Tensor]   # seed time of each node's subtree (temporal mode)


class HopState:
    """Nodes seen so far (per type), the current frontier and the sampled edges.

    Args:
        seeds: global seed ids per node type (unique unless ``disjoint``).
        disjoint: identify nodes per subtree; every seed starts a subtree of its own,
            numbered over the seed types in order (the second type's first seed starts
            the subtree after the first type's last), as PyG's samplers number them.
        seed_time: time of each seed (temporal sampling).
        capacity_hint: expected nodes per type (sizes the hash maps).
        original_eids: every hop brings the sampled edges' original ids too (the
            output's ``original_edge``, kept in :class:`Column` s).
        edge_hints: room per edge type of those columns, read at the start and updated
            at :meth:`output` (the sampler keeps one dict across batches).
        pool (NodeIndexPool, optional): where the hash tables come from and go back to
            (:meth:`release`); default: new ones.
        key_bounds: the number of global ids per node type (ids lie below it), which
            lets a batch that samples a good part of them relabel through a direct
            table (:mod:`pyg_dist.sampler._node_index`); not used in disjoint mode.
        num_hops (int, optional): the hops the batch samples. The last one's edges
            (most of the batch's) are then written straight into the batch's final
            ``[2, E]`` edge tensor (rows relabelled into its first row, destinations
            filled into its second, the earlier hops' few edges copied in front), with
            no concatenation at :meth:`output`. ``None``: every hop's edges are
            concatenated at :meth:`output` (the result is the same). After the last
            hop there is no next :attr:`frontier` (no copy of the last hop's nodes).
    """

    def __init__(self, seeds: Dict[NodeType, Tensor], disjoint: bool,
                 seed_time: Optional[Dict[NodeType, Tensor]] = None,
                 capacity_hint: int = 1024, original_eids: bool = False,
                 edge_hints: Optional[Dict[EdgeType, int]] = None,
                 pool: Optional[NodeIndexPool] = None,
                 key_bounds: Optional[Dict[NodeType, int]] = None,
                 num_hops: Optional[int] = None) -> None:
        if num_hops is not None and (isinstance(num_hops, bool) or
                                     not isinstance(num_hops, int) or num_hops < 0):
            raise ValueError(f"num_hops must be a non-negative int or None, got "
                             f"{num_hops!r}")
        self.num_hops = num_hops
        self.disjoint = disjoint
        self.pool = pool
        self.key_bounds = {} if disjoint or key_bounds is None else key_bounds
        self.original: Optional[Dict[EdgeType, Column]] = {} if original_eids else None
        self._drawn: Dict[EdgeType, int] = {}  # this hop's values drawn into spares so far
        self.edge_hints = edge_hints if edge_hints is not None else {}
        self.index: Dict[NodeType, NodeIndex] = {}
        self.frontier: Dict[NodeType, Frontier] = {}
        self.num_nodes: Dict[NodeType, List[int]] = {}
        self.rows: Dict[EdgeType, List[Tensor]] = {}
        self.cols: Dict[EdgeType, List[Tensor]] = {}
        self.eids: Dict[EdgeType, List[Tensor]] = {}
        self.num_edges: Dict[EdgeType, List[int]] = {}
        self.hops_done = 0
        self.capacity_hint = capacity_hint
        self.subtree_time = _subtree_time(seeds, seed_time) if disjoint else None
        first = 0  # disjoint: the seeds of every type start subtrees of their own, in order
        for node_type, ids in seeds.items():
            batch = torch.arange(first, first + ids.numel()) if disjoint else None
            first += ids.numel()
            self.index[node_type] = self._new_index(ids.numel(), node_type)
            self.index[node_type].insert(self._keys(ids, batch))
            self.num_nodes[node_type] = [ids.numel()]
            self.frontier[node_type] = Frontier(ids, torch.arange(ids.numel()), batch,
                                                self._time_of(batch))

    def _new_index(self, size: int, node_type: NodeType) -> NodeIndex:
        hint, bound = max(self.capacity_hint, size), self.key_bounds.get(node_type)
        return self.pool.take(hint, bound) if self.pool is not None else \
            NodeIndex(hint, bound)

    def release(self) -> None:
        """Gives the hash tables back to the pool (after :meth:`output`; the state is
        done with)."""
        if self.pool is not None:
            for index in self.index.values():
                self.pool.give(index)
        self.index = {}

    def _keys(self, ids: Tensor, batch: Optional[Tensor]) -> Tensor:
        """Hash keys: the ids, or ``subtree << ID_BITS | id`` in disjoint mode (ids and
        subtrees must fit their bits, or nodes of different subtrees would collide)."""
        if batch is None or ids.numel() == 0:
            return ids
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo >= 0 and (hi > ID_MASK or int(batch.max()) >= 1 << (63 - ID_BITS)):
            raise ValueError(f"disjoint sampling encodes (subtree, id) in 64 bits: ids must "
                             f"be below 2^{ID_BITS} and subtrees below 2^{63 - ID_BITS}, "
                             f"got id {hi}")
        return (batch << ID_BITS) | ids  # a negative id is refused by the NodeIndex

    def _time_of(self, batch: Optional[Tensor]) -> Optional[Tensor]:
        if self.subtree_time is None or batch is None:
            return None
        return self.subtree_time[batch]

    def add_edges(self, edge_type: EdgeType, col: Tensor, nbrs: Tensor, eids: Tensor,
                  batch: Optional[Tensor], original: Optional[Tensor] = None) -> None:
        """Records sampled edges ``nbrs -> node col`` (``col`` indexes ``edge_type[2]``).

        ``batch`` is the subtree of each edge's destination (disjoint mode);
        ``original`` the edges' original ids (needed when the state tracks them).
        """
        if self.original is not None:
            if original is None:
                raise ValueError("this hop state records original edge ids: pass them")
            self._column(edge_type).append(original)
        self._add_nodes(edge_type, col, nbrs, eids, batch)

    def _final_pair(self, edge_type: EdgeType, n: int
                    ) -> Optional[Tuple[Tensor, Tensor, int]]:
        """At the last hop, the two rows of the edge type's final ``[2, E]`` tensor for
        ``n`` more edges, and where they start (after the earlier hops' edges);
        ``None`` before the last hop (or when ``num_hops`` is not known)."""
        if self.hops_done + 1 != self.num_hops:
            return None
        start = sum(r.numel() for r in self.rows.get(edge_type, ()))
        row, dst = torch.empty(2, start + n, dtype=torch.long).unbind()
        return row, dst, start

    def _add_nodes(self, edge_type: EdgeType, col: Optional[Tensor], nbrs: Tensor,
                   eids: Tensor, batch: Optional[Tensor],
                   repeat: Optional[Tuple[Tensor, Tensor]] = None,
                   final: Optional[Tuple[Tensor, Tensor, int]] = None) -> None:
        """Relabels ``nbrs`` and records the edges; ``col`` ``None``: the destinations
        are ``repeat = (seeds, counts)``, each seed repeated per edge. ``final``: the
        :meth:`_final_pair` already taken (``col`` may lie in it)."""
        n = nbrs.numel()
        if col is not None and col.numel() != n:
            raise ValueError(f"{col.numel()} destinations for {n} sampled edges")
        src_type = edge_type[0]
        if src_type not in self.index:
            self.index[src_type] = self._new_index(n, src_type)
            self.num_nodes[src_type] = [0] * (self.hops_done + 1)
        index, keys = self.index[src_type], self._keys(nbrs, batch)
        rows = self.rows.setdefault(edge_type, [])
        cols = self.cols.setdefault(edge_type, [])
        final = final if final is not None else self._final_pair(edge_type, n)
        if final is not None:  # the last hop: into the final tensor
            row, dst, start = final
            if col is None:  # before the insert: bad counts or keys change nothing
                repeat_into(repeat[0], repeat[1], out=dst[start:])
            elif col.data_ptr() != dst[start:].data_ptr():  # not laid out in place
                dst[start:] = col
            index.insert(keys, out=row[start:])
            if rows:  # the earlier hops' (few) edges in front
                _cat_into(rows, row[:start])
                _cat_into(cols, dst[:start])
            rows[:] = [row]
            cols[:] = [dst]
        else:
            if col is None:
                col = repeat_into(repeat[0], repeat[1],
                                  out=torch.empty(n, dtype=torch.long))
            rows.append(index.insert(keys))
            cols.append(col)
        self.eids.setdefault(edge_type, []).append(eids)

    def add_hop_edges(self, edge_type: EdgeType, pieces: List[EdgePiece]) -> int:
        """Records one hop's edges of ``edge_type`` that several partitions sampled, in
        a single machine's order: by destination (their position in the frontier), each
        destination's neighbours in the order its owner listed them. The pieces are
        given in merge order (own, direct, remote: see :meth:`Column.append`), each
        with its destinations ascending and disjoint from the other pieces'. Returns the
        number of edges added."""
        if len(pieces) == 1:
            p = pieces[0]
            if self.original is not None:
                if p.original is None:
                    raise ValueError("this hop state records original edge ids: pass them")
                self._column(edge_type).append(p.original)
            self._add_nodes(edge_type, p.col, p.nbrs, p.eids, p.batch, (p.seeds, p.counts))
            return int(p.nbrs.numel())
        final = self._final_pair(edge_type, sum(p.nbrs.numel() for p in pieces))
        runs = seed_runs([p.seeds for p in pieces], [p.counts for p in pieces],
                         col_out=None if final is None else final[1][final[2]:])
        if self.original is not None:
            if any(p.original is None for p in pieces):
                raise ValueError("this hop state records original edge ids: pass them")
            column = self._column(edge_type)
            start = column.size
            for p in pieces:  # in place where drawn, then put in order
                column.append(p.original)
            column.order_tail(start, runs)

        def ordered(parts: List[Tensor]) -> Tensor:
            return take_runs(torch.cat(parts), runs)

        batch = ordered([p.batch for p in pieces]) if pieces[0].batch is not None else None
        self._add_nodes(edge_type, runs.col, ordered([p.nbrs for p in pieces]),
                        ordered([p.eids for p in pieces]), batch, final=final)
        return runs.total

    def _column(self, edge_type: EdgeType) -> Column:
        if edge_type not in self.original:
            self.original[edge_type] = Column(self.edge_hints.get(edge_type, 0))
        return self.original[edge_type]

    def spares(self, request: Optional[HopRequest]) -> Optional[List[Optional[Tensor]]]:
        """Per edge type of a hop ``request`` run in this process (its own partition's,
        or a same-machine partition's read directly), the room its edges' original ids
        may be drawn into: after those that requests before it in this hop drew (see
        :meth:`drew`; ``None``: not recorded, or no bound on a fan-out of -1, or one
        above :data:`SPARE_MAX_FANOUT`, which the kernel draws into an array of the size
        it drew: room for ``seeds x fanout`` would be bounded by no degree)."""
        if self.original is None or request is None:
            return None
        return [self._column(t).spare(seeds.numel() * fanout, self._drawn.get(t, 0))
                if 0 <= fanout <= SPARE_MAX_FANOUT else None
                for t, seeds, fanout in zip(request.edge_types, request.seeds,
                                            request.fanouts)]

    def drew(self, request: HopRequest, response: HopResponse) -> None:
        """Records a response to a request given :meth:`spares`: the next request's room
        starts after its pieces (merged in the same order)."""
        for t, values in zip(request.edge_types, response.original_eids or ()):
            self._drawn[t] = self._drawn.get(t, 0) + values.numel()

    def end_hop(self, sampled: Dict[EdgeType, int]) -> None:
        """Closes a hop: the nodes added during it become the next frontier (none after
        the last hop, when ``num_hops`` is given: nothing samples from it).

        ``sampled`` holds the number of edges sampled per edge type (every type).
        """
        for edge_type, n in sampled.items():
            self.num_edges.setdefault(edge_type, []).append(n)
        self.hops_done += 1
        self._drawn = {}
        self.frontier = {}
        last = self.num_hops is not None and self.hops_done >= self.num_hops
        for node_type, index in self.index.items():
            before = sum(self.num_nodes[node_type])
            added = len(index) - before
            self.num_nodes[node_type].append(added)
            if added == 0 or last:
                continue
            keys = index.keys_since(before)
            ids, batch = (keys & ID_MASK, keys >> ID_BITS) if self.disjoint else (keys, None)
            self.frontier[node_type] = Frontier(ids, torch.arange(before, len(index)), batch,
                                                self._time_of(batch))

    def output(self, edge_types: List[EdgeType]) -> SampledSubgraph:
        """The sampled subgraph with every edge type present (possibly empty)."""
        empty = torch.empty(0, dtype=torch.long)
        node, batch = {}, ({} if self.disjoint else None)
        for node_type, index in self.index.items():
            keys = index.keys
            node[node_type] = keys & ID_MASK if self.disjoint else keys
            if batch is not None:
                batch[node_type] = keys >> ID_BITS

        def cat(parts: Dict[EdgeType, List[Tensor]], t: EdgeType) -> Tensor:
            return torch.cat(parts[t]) if t in parts else empty

        hops = self.hops_done
        pairs = {t: _edge_pair(self.rows.get(t), self.cols.get(t)) for t in edge_types}
        return SampledSubgraph(
            node=node, row={t: pair[0] for t, pair in pairs.items()},
            col={t: pair[1] for t, pair in pairs.items()},
            edge={t: cat(self.eids, t) for t in edge_types}, batch=batch,
            num_sampled_nodes=dict(self.num_nodes),
            num_sampled_edges={t: self.num_edges.get(t, [0] * hops) for t in edge_types},
            original_edge=None if self.original is None else self._original(edge_types))

    def _original(self, edge_types: List[EdgeType]) -> Dict[EdgeType, Tensor]:
        for t, column in self.original.items():
            self.edge_hints[t] = column.peak + column.peak // 8
        return {t: self.original[t].result() if t in self.original
                else torch.empty(0, dtype=torch.long) for t in edge_types}


def _cat_into(parts: List[Tensor], out: Tensor) -> None:
    if len(parts) == 1:
        out.copy_(parts[0])
    else:
        torch.cat(parts, out=out)


def _edge_pair(rows: Optional[List[Tensor]], cols: Optional[List[Tensor]]
               ) -> Tuple[Tensor, Tensor]:
    """The rows and columns of an edge type's pieces, concatenated into the two rows of
    one ``[2, E]`` tensor (:func:`edge_index` gives it back without a copy); a single
    piece that already is one (the last hop wrote the batch's edges there) as it is."""
    if not rows:
        empty = torch.empty(0, dtype=torch.long)
        return empty, empty
    if len(rows) == 1 and _pair_base(rows[0], cols[0]) is not None:
        return rows[0], cols[0]
    both = torch.empty(2, sum(r.numel() for r in rows), dtype=torch.long)
    torch.cat(rows, out=both[0])
    torch.cat(cols, out=both[1])
    return both[0], both[1]


def _pair_base(row: Tensor, col: Tensor) -> Optional[Tensor]:
    """The ``[2, E]`` tensor whose two rows ``row`` and ``col`` are, if they are."""
    base = row._base
    if base is not None and col._base is base and base.dim() == 2 and \
            base.shape == (2, row.numel()) and base.is_contiguous() and \
            row.data_ptr() == base.data_ptr() and \
            col.data_ptr() == base.data_ptr() + row.numel() * base.element_size():
        return base
    return None


def edge_index(row: Tensor, col: Tensor) -> Tensor:
    """``torch.stack([row, col])``, without a copy when ``row`` and ``col`` are the two
    rows of one ``[2, E]`` tensor (as :meth:`HopState.output` makes them)."""
    base = _pair_base(row, col)
    return base if base is not None else torch.stack([row, col])


def _subtree_time(seeds: Dict[NodeType, Tensor],
                  seed_time: Optional[Dict[NodeType, Tensor]]) -> Optional[Tensor]:
    """Time of every subtree: its seed's time (subtrees numbered over the seed types in
    order, as :class:`HopState` numbers them)."""
    if not seed_time:
        return None
    missing = [t for t in seeds if t not in seed_time]
    if missing:
        raise ValueError(f"temporal sampling: no seed time for seed node type(s) {missing}")
    return torch.cat([seed_time[t].view(-1).long() for t in seeds])
