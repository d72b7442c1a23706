"""Steps 4 of multi-machine partitioning: node and edge data rows, and halo rows, sent
from the rank reading them to the writer of their partition (bounded rounds)."""
from __future__ import annotations

from typing import Dict, Iterator, List, Tuple

import numpy as np

from pyg_dist.format._meta import AttrSpec
from pyg_dist.partition._common import type_offsets
from pyg_dist.partition._distributed.comm import ArrayComm, home_of, lookup, route
from pyg_dist.partition._distributed.team import writer_of
from pyg_dist.partition._graph_kernels import sorted_unique
from pyg_dist.partition._outofcore.budget import MemoryBudget
from pyg_dist.partition._outofcore.row_copy import gather_rows, row_bytes
from pyg_dist.partition._outofcore.scratch import Scratch
from pyg_dist.partition._outofcore.source import ChunkedSource
from pyg_dist.partition._writer import halo_attr_names
from pyg_dist._typing import EdgeType, NodeType


class RowExchange:
    """The row-moving steps of
    :class:`~pyg_dist.partition._distributed.stages.DistStages` (which sets the
    attributes below before they run).

    Attributes:
        comm (ArrayComm): the ranks. source (ChunkedSource): the input. budget
        (MemoryBudget): this rank's budget. num_parts (int): partitions. mine
        (List[int]): the partitions this rank writes. block (int): ids per round.
        halo_attrs (tuple): node attributes stored for halo nodes. files, node_ranges:
        this rank's share of the edges and nodes (set by the assign step).
    """
    comm: ArrayComm
    source: ChunkedSource
    budget: MemoryBudget
    num_parts: int
    mine: List[int]
    block: int
    halo_attrs: Tuple[str, ...]

    def _writer_arrays(self, scratch: Scratch, name: str, spec, offsets: Tuple[int, ...]
                       ) -> Dict[int, np.ndarray]:
        return {p: scratch.array(name, np.dtype(spec.dtype),
                                 (offsets[p + 1] - offsets[p], *spec.shape)) for p in self.mine}

    def _send_rows(self, new: np.ndarray, rows: np.ndarray, offsets: Tuple[int, ...],
                   outs: Dict[int, np.ndarray], what: str) -> None:
        """Sends ``rows`` (new ids ``new``) to the writers of their partitions, which
        store them in ``outs`` (a collective round)."""
        P, comm = self.num_parts, self.comm
        bounds = np.array(offsets, dtype=np.int64)
        parts = home_of(new, bounds)
        writers = np.array([writer_of(p, P, comm.world) for p in range(P)],
                           dtype=np.int64)[parts]
        got_new, got_rows = route(comm, writers, [new, rows], what)
        got_parts = home_of(got_new, bounds)
        for p in sorted_unique(got_parts):
            mine = got_parts == p
            outs[int(p)][got_new[mine] - bounds[p]] = got_rows[mine]

    def _node_blocks(self, node_type: NodeType, block: int) -> Iterator[Tuple[int, int]]:
        a, b = self.node_ranges[node_type]
        for s in range(a, b, block):
            yield s, min(s + block, b)

    def _node_rows(self, numbers: np.ndarray, node_offsets, scratch: Scratch):
        comm, src = self.comm, self.source
        offsets = type_offsets(src.num_nodes)
        lo = src.total_nodes * comm.rank // comm.world
        node_rows: Dict[NodeType, Dict[str, Dict[int, np.ndarray]]] = {}
        node_ids: Dict[NodeType, Dict[int, np.ndarray]] = {}
        for t in src.num_nodes:
            node_ids[t] = self._writer_arrays(scratch, f"node-ids-{t}", AttrSpec("int64", ()),
                                              node_offsets[t])
            what = f"sending node ids of {t} to their partitions"
            for piece in comm.rounds(self._node_blocks(t, self.block), what):
                a, b = piece if piece is not None else (0, 0)
                local = np.arange(a, b, dtype=np.int64) + offsets[t] - lo
                self._send_rows(numbers[local, 0], np.arange(a, b, dtype=np.int64),
                                node_offsets[t], node_ids[t], what)
            node_rows[t] = {}
            for name, spec in src.node_specs[t].items():
                outs = self._writer_arrays(scratch, f"node-{name}", spec, node_offsets[t])
                what = f"sending node data {t}/{name} to its partitions"
                block = self.budget.block_rows(2 * row_bytes(spec) + 32)
                for piece in comm.rounds(self._node_blocks(t, block), what):
                    a, b = piece if piece is not None else (0, 0)
                    rows = src.node_rows(t, name, a, b)
                    local = np.arange(a, b, dtype=np.int64) + offsets[t] - lo
                    self._send_rows(numbers[local, 0], rows, node_offsets[t], outs, what)
                node_rows[t][name] = outs
        return node_rows, node_ids

    def _edge_rows(self, edge_ids, edge_offsets, scratch: Scratch):
        comm, src = self.comm, self.source
        edge_rows: Dict[EdgeType, Dict[str, Dict[int, np.ndarray]]] = {}
        for et, specs in src.edge_specs.items():
            edge_rows[et] = {}
            if not specs:
                continue
            name = src.edge_names[et]
            bounds = self.files.bounds[et]
            lo, hi = int(bounds[comm.rank]), int(bounds[comm.rank + 1])
            inverse = scratch.array(f"edge-inverse-{name}", np.int64, (hi - lo,))
            what = f"locating the edges of {name}"

            def mapped() -> Iterator[Tuple[np.ndarray, np.ndarray]]:
                for p in self.mine:
                    ids = edge_ids[et][p]
                    for s in range(0, ids.shape[0], self.block):
                        e = min(s + self.block, ids.shape[0])
                        yield np.asarray(ids[s:e]), edge_offsets[et][p] + np.arange(s, e)

            for piece in comm.rounds(mapped(), what):
                old, new = piece if piece is not None else (np.empty(0, np.int64),
                                                            np.empty(0, np.int64))
                got_old, got_new = route(comm, home_of(old, bounds), [old, new], what)
                inverse[got_old - lo] = got_new
            for key, spec in specs.items():
                outs = self._writer_arrays(scratch, f"edge-{key}", spec, edge_offsets[et])
                what = f"sending edge data {name}/{key} to its partitions"
                block = self.budget.block_rows(2 * row_bytes(spec) + 32)
                ranges = ((s, min(s + block, hi)) for s in range(lo, hi, block))
                for piece in comm.rounds(ranges, what):
                    a, b = piece if piece is not None else (lo, lo)
                    rows = src.edge_rows(et, key, a, b)
                    self._send_rows(np.asarray(inverse[a - lo:b - lo]), rows, edge_offsets[et],
                                    outs, what)
                edge_rows[et][key] = outs
            Scratch.drop(inverse)
        return edge_rows

    def _halo_rows(self, halos, node_rows, node_offsets) -> Dict[int, Dict[NodeType, dict]]:
        """Rows of halo attributes for every halo node of this rank's partitions, asked
        from the writers of the partitions owning them."""
        comm, P = self.comm, self.num_parts
        out: Dict[int, Dict[NodeType, dict]] = {p: {} for p in self.mine}
        firsts = [min([p for p in range(P) if writer_of(p, P, comm.world) == r] or [P])
                  for r in range(comm.world)]
        for t in self.source.num_nodes:
            names = halo_attr_names(self.source, t, self.halo_attrs)
            if not names:
                continue
            offsets = node_offsets[t]
            bounds = np.array([offsets[f] for f in firsts] + [offsets[-1]], dtype=np.int64)
            mine_offsets = [offsets[p] for p in self.mine] + \
                ([offsets[self.mine[-1] + 1]] if self.mine else [])
            ids = [halos[p].halo.get(t, np.empty(0, np.int64)) for p in self.mine]
            every = np.concatenate(ids) if ids else np.empty(0, np.int64)
            for name in names:
                spec = self.source.node_specs[t][name]
                arrays = [node_rows[t][name][p] for p in self.mine]
                rows = lookup(comm, every, bounds,
                              lambda k: gather_rows(arrays, mine_offsets, k, spec),
                              f"fetching halo rows of {t}/{name}")
                cuts = np.cumsum([i.shape[0] for i in ids])[:-1]
                for p, piece in zip(self.mine, np.split(rows, cuts)):
                    if t in halos[p].halo:
                        out[p].setdefault(t, {})[name] = piece
        return out
