"""Assigning nodes to partitions: METIS (via pymetis) or balanced random."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict

import numpy as np

from pyg_dist.partition.kernels import EdgeBlock, move_gain, symmetric_csr
from pyg_dist.partition.tables import GraphTables
from pyg_dist.typing import NodeType

METHODS = ("metis", "random")


@dataclass
class Assignment:
    """The partition of every node, per node type, and where the time went.

    Args:
        parts: per node type, the partition id of every node (int64).
        phases_s: seconds per step (``"adjacency"``, ``"metis"`` (the pymetis call
            only), ``"balance"``), empty for the random method.
    """
    parts: Dict[NodeType, np.ndarray]
    phases_s: Dict[str, float] = field(default_factory=dict)

    @property
    def metis_s(self) -> float:
        return self.phases_s.get("metis", 0.0)


def assign(tables: GraphTables, num_parts: int, method: str, seed: int) -> Assignment:
    """Returns the partition of every node, per node type (see :class:`Assignment`)."""
    if method not in METHODS:
        raise ValueError(f"unknown partition method '{method}' (choose from {METHODS})")
    if num_parts == 1:
        return Assignment({t: np.zeros(n, dtype=np.int64) for t, n in tables.num_nodes.items()})
    if method == "random":
        return Assignment(random_assign(tables, num_parts, seed))
    return metis_assign(tables, num_parts, seed)


def _type_offsets(tables: GraphTables) -> Dict[NodeType, int]:
    offsets, total = {}, 0
    for node_type, n in tables.num_nodes.items():
        offsets[node_type] = total
        total += n
    return offsets


def _train_mask(tables: GraphTables, node_type: NodeType) -> np.ndarray:
    mask = tables.masks(node_type).get("train")
    if mask is None:
        return np.zeros(tables.num_nodes[node_type], dtype=bool)
    return mask.numpy()


def metis_assign(tables: GraphTables, num_parts: int, seed: int) -> Assignment:
    """METIS on the symmetrised homogeneous view of all node and edge types.

    Vertex weights carry one constraint per node type (each type is balanced on its
    own) and, when a ``train_mask`` exists, one for training nodes, so every
    partition gets a fair share of the seeds.
    """
    import pymetis

    phases, start = {}, time.perf_counter()
    offsets = _type_offsets(tables)
    blocks = [EdgeBlock(index[0].numpy(), index[1].numpy(), offsets[et[0]], offsets[et[2]])
              for et, index in tables.edge_index.items()]
    xadj, adjncy = symmetric_csr(blocks, tables.total_nodes)
    del blocks
    weights = _vertex_weights(tables, offsets)
    options = pymetis.Options()
    options.seed = seed
    phases["adjacency"], start = time.perf_counter() - start, time.perf_counter()
    _, parts = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy),
                                  vweights=weights.reshape(-1), options=options)
    phases["metis"], start = time.perf_counter() - start, time.perf_counter()
    del weights
    parts = np.asarray(parts, dtype=np.int64)
    train = np.concatenate([_train_mask(tables, t) for t in tables.num_nodes])
    balance_train(parts, train, xadj, adjncy, num_parts)
    del xadj, adjncy
    phases["balance"] = time.perf_counter() - start
    return Assignment({t: parts[offsets[t]:offsets[t] + n] for t, n in tables.num_nodes.items()},
                      phases)


def _vertex_weights(tables: GraphTables, offsets: Dict[NodeType, int]) -> np.ndarray:
    types = list(tables.num_nodes)
    trains = {t: _train_mask(tables, t) for t in types}
    has_train = any(m.any() for m in trains.values())
    ncon = len(types) + int(has_train)
    weights = np.zeros((tables.total_nodes, ncon), dtype=np.int64)
    for i, node_type in enumerate(types):
        lo, hi = offsets[node_type], offsets[node_type] + tables.num_nodes[node_type]
        weights[lo:hi, i] = 1
        if has_train:
            weights[lo:hi, -1] = trains[node_type]
    return weights


def balance_train(parts: np.ndarray, train: np.ndarray, xadj: np.ndarray, adj: np.ndarray,
                  num_parts: int, tolerance: float = 0.05) -> None:
    """Post-pass after METIS: evens out training nodes across partitions (in place).

    METIS balances the train-node constraint only loosely on small or skewed graphs.
    While a partition holds more than ``(1 + tolerance)`` times its share, its train
    nodes that cut the fewest edges when moved go to the emptiest partition, and as
    many non-train nodes move back, so node counts stay as METIS left them.
    """
    total = int(train.sum())
    if total == 0 or num_parts == 1:
        return
    limit = max(int(np.ceil(total / num_parts * (1 + tolerance))), 1)
    for _ in range(4 * num_parts):
        counts = np.bincount(parts[train], minlength=num_parts)
        src, dst = int(counts.argmax()), int(counts.argmin())
        if counts[src] <= limit:
            return
        need = int(min(counts[src] - limit, limit - counts[dst], counts[src] - counts[dst]))
        if need <= 0:
            return
        for movers, a, b in ((np.flatnonzero(train & (parts == src)), src, dst),
                             (np.flatnonzero(~train & (parts == dst)), dst, src)):
            gain = move_gain(xadj, adj, parts, movers, a, b)
            chosen = movers[np.argsort(-gain, kind="stable")[:need]]
            parts[chosen] = b


def random_assign(tables: GraphTables, num_parts: int, seed: int) -> Dict[NodeType, np.ndarray]:
    """Balanced random assignment: nodes are shuffled and dealt round robin.

    Training nodes and the rest are dealt separately, so both are balanced.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for node_type, n in tables.num_nodes.items():
        parts = np.empty(n, dtype=np.int64)
        train = _train_mask(tables, node_type)
        dealt = 0
        for group in (np.flatnonzero(train), np.flatnonzero(~train)):
            shuffled = rng.permutation(group)
            parts[shuffled] = (dealt + np.arange(shuffled.size)) % num_parts
            dealt += shuffled.size
        out[node_type] = parts
    return out
