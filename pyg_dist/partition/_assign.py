"""Assigning nodes to partitions: METIS (via pymetis, on the graph or on its clusters),
balanced random; and what every assigner takes (:class:`AssignInput`,
:class:`AssignOptions`). KaMinPar lives in :mod:`~pyg_dist.partition._kaminpar_assign`;
a given assignment is checked by :mod:`~pyg_dist.partition._given`;
:mod:`~pyg_dist.partition._assigners` registers them all by name."""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from pyg_dist.partition._coarsen import (cluster, contract, deal_clusters,
                                        refine)
from pyg_dist.partition._common import node_groups, split_by_type
from pyg_dist.partition._graph_kernels import move_gain
from pyg_dist._typing import NodeType
from pyg_dist.memory import available_memory

CLUSTERS_PER_PART = 256  # with coarsen: the size cap keeps at least this many per part
# METIS's peak working memory per byte of int64 adjacency it is given, measured with
# this pymetis build (64-bit indices): 7.6 GiB for a 1 GiB adjacency (124M entries).
METIS_BYTES_PER_ADJACENCY_BYTE = 8


def should_coarsen(adjacency_bytes: int, available: Optional[int]) -> bool:
    """Whether plain METIS would likely not fit: its estimated working memory exceeds
    what is available (never when that is unknown)."""
    return available is not None and \
        adjacency_bytes * METIS_BYTES_PER_ADJACENCY_BYTE > available


@dataclass
class Assignment:
    """The partition of every node, per node type, and where the time went.

    Args:
        parts: per node type, the partition id of every node (int64).
        phases_s: seconds per step (``"adjacency"``, ``"coarsen"`` when coarsened,
            ``"metis"`` (the pymetis call only), ``"balance"``), empty for the random
            method.
    """
    parts: Dict[NodeType, np.ndarray]
    phases_s: Dict[str, float] = field(default_factory=dict)

    @property
    def metis_s(self) -> float:
        return self.phases_s.get("metis", 0.0)


def _keep(array: np.ndarray) -> None:
    """The default :attr:`AssignInput.drop`: in-memory arrays go with their last reference."""


@dataclass
class AssignInput:
    """What an assigner sees of a graph, whether it is in memory or streamed from chunks.

    Args:
        num_nodes: nodes per type (all types share one id space, in this order).
        is_hetero (bool): whether the graph is heterogeneous.
        trains: returns per node type whether each node is a training node.
        csr: builds the symmetric, loop-free CSR ``(xadj, adjncy)`` of all edge types
            in the combined id space (arrays or memory maps).
        memory_budget (int, optional): bytes METIS may use; ``None``: the memory
            available now (and a warning when that makes METIS coarsen).
        drop: gives back an array ``csr`` returned once it is no longer needed.
    """
    num_nodes: Dict[NodeType, int]
    is_hetero: bool
    trains: Callable[[], Dict[NodeType, np.ndarray]]
    csr: Callable[[], Tuple[np.ndarray, np.ndarray]]
    memory_budget: Optional[int] = None
    drop: Callable[[np.ndarray], None] = _keep


@dataclass(frozen=True)
class AssignOptions:
    """Which assigner runs and with what.

    Args:
        method (str): ``"metis"``, ``"kaminpar"``, ``"random"`` or ``"given"``.
        seed (int): seed of the assigner.
        coarsen (bool, optional): METIS on a label-propagation clustering; ``None``:
            only when plain METIS would not fit the memory (see :class:`AssignInput`).
        recursive (bool, optional): METIS's algorithm: ``True`` recursive bisection,
            ``False`` k-way, ``None`` pymetis's choice.
        given (Tensor or dict, optional): with ``"given"``, the partition of every node.
    """
    method: str = "metis"
    seed: int = 0
    coarsen: Optional[bool] = None
    recursive: Optional[bool] = None
    given: Any = None


def metis_assign(graph: AssignInput, num_parts: int, options: AssignOptions) -> Assignment:
    """METIS on the symmetrised homogeneous view of all node and edge types.

    Vertex weights carry one constraint per node type (each type is balanced on its
    own) and, when a ``train_mask`` exists, one for training nodes, so every
    partition gets a fair share of the seeds. With ``coarsen``, METIS partitions the
    graph of label-propagation clusters (see :func:`assign_csr`): far less memory and
    time on large graphs, a somewhat larger cut; phases then include ``"coarsen"``.
    ``coarsen=None`` decides by memory (:func:`should_coarsen`, or the input's
    budget).
    """
    trains = graph.trains()
    start = time.perf_counter()
    xadj, adjncy = graph.csr()
    weights = vertex_weights(graph.num_nodes, trains)
    phases = {"adjacency": time.perf_counter() - start}
    coarsen = options.coarsen
    if coarsen is None:
        coarsen = _coarsen_for_memory(adjncy.nbytes) if graph.memory_budget is None else \
            adjncy.nbytes * METIS_BYTES_PER_ADJACENCY_BYTE > graph.memory_budget
    train = np.concatenate(list(trains.values()))
    del trains
    parts = assign_csr(xadj, adjncy, weights, node_groups(graph.num_nodes), train, num_parts,
                       options.seed, coarsen, options.recursive, phases,
                       coarse_budget=graph.memory_budget)
    graph.drop(adjncy)
    return Assignment(split_by_type(parts, graph.num_nodes), phases)


def random_assign(graph: AssignInput, num_parts: int, options: AssignOptions) -> Assignment:
    """Balanced random assignment (see :func:`random_parts`)."""
    return Assignment(random_parts(graph.num_nodes, graph.trains(), num_parts, options.seed))


def assign_csr(xadj: np.ndarray, adjncy: np.ndarray, weights: np.ndarray, group: np.ndarray,
               train: np.ndarray, num_parts: int, seed: int, coarsen: bool,
               recursive: Optional[bool], phases: Dict[str, float],
               coarse_budget: Optional[int] = None) -> np.ndarray:
    """METIS (on the graph, or with ``coarsen`` on its label-propagation clusters) and
    the balance post-passes, on a symmetric CSR of all node types together.

    Args:
        xadj, adjncy: the CSR (:func:`~pyg_dist.partition._graph_kernels.symmetric_csr`; any
            int64 arrays, memory maps included).
        weights: ``[num_nodes, ncon]`` vertex weights (:func:`vertex_weights`).
        group: node type index of every node.
        train: whether every node is a training node.
        phases: where to add seconds of ``"coarsen"``, ``"metis"`` and ``"balance"``.
        coarse_budget (int, optional): with ``coarsen``, the most bytes METIS may use on
            the cluster graph; when its estimate is larger (a graph with little
            community structure keeps most edges between clusters), the clusters are
            dealt to partitions by size instead (:func:`deal_clusters`, with a warning)
            and the refinement alone reduces the cut.

    Returns:
        The partition of every node (int64).
    """
    start = time.perf_counter()
    if coarsen:
        parts = _coarse_parts(xadj, adjncy, weights, group, num_parts, seed, recursive,
                              phases, coarse_budget)
        del weights
        start = time.perf_counter()
        refine(parts, xadj, adjncy, group, train, num_parts)
    else:
        parts = _part_graph(num_parts, seed, xadj, adjncy, None, weights, recursive)
        del weights
        phases["metis"], start = time.perf_counter() - start, time.perf_counter()
    balance_nodes(parts, [group == i for i in range(int(group.max(initial=-1)) + 1)], xadj,
                  adjncy, num_parts)
    balance_train(parts, train, xadj, adjncy, num_parts)
    phases["balance"] = time.perf_counter() - start
    return parts


def _coarse_parts(xadj: np.ndarray, adjncy: np.ndarray, weights: np.ndarray,
                  group: np.ndarray, num_parts: int, seed: int, recursive: Optional[bool],
                  phases: Dict[str, float], coarse_budget: Optional[int]) -> np.ndarray:
    """Clusters, then METIS on the cluster graph (or clusters dealt by size when METIS
    would exceed ``coarse_budget``), projected back to the nodes."""
    start = time.perf_counter()
    total = xadj.shape[0] - 1
    labels, k = cluster(xadj, adjncy, -(-total // (CLUSTERS_PER_PART * num_parts)), seed)
    # node-type constraints only: METIS balances a train constraint on clusters of a
    # few nodes poorly and at a large cost in cut (1.2-1.35x on community graphs);
    # balance_train evens out the training nodes instead
    types = int(group.max(initial=0)) + 1
    limit = None if coarse_budget is None else \
        coarse_budget // (8 * METIS_BYTES_PER_ADJACENCY_BYTE)
    coarse = contract(xadj, adjncy, labels, k, weights[:, :types], limit=limit)
    if coarse is None:
        warnings.warn(f"the graph has little community structure: METIS on its {k} "
                      f"clusters would need more than the {coarse_budget / 2**20:.1f} MiB "
                      f"allowed; dealing clusters to partitions by size and refining "
                      f"instead (a larger cut)", stacklevel=3)
        parts = deal_clusters(labels, k, num_parts)[labels]
        phases["coarsen"] = time.perf_counter() - start
        return parts
    phases["coarsen"], start = time.perf_counter() - start, time.perf_counter()
    parts = _part_graph(num_parts, seed, *coarse, recursive=recursive)[labels]
    phases["metis"] = time.perf_counter() - start
    return parts


def _coarsen_for_memory(adjacency_bytes: int) -> bool:
    """:func:`should_coarsen` with the memory available now; warns when it says yes."""
    available = available_memory()
    if not should_coarsen(adjacency_bytes, available):
        return False
    need_gib = adjacency_bytes * METIS_BYTES_PER_ADJACENCY_BYTE / 2**30
    warnings.warn(f"plain METIS would need about {need_gib:.1f} GiB but "
                  f"{available / 2**30:.1f} GiB are available: partitioning a "
                  f"label-propagation clustering instead (coarsen=True; pass "
                  f"coarsen=False to force plain METIS)", stacklevel=4)
    return True


def _part_graph(num_parts: int, seed: int, xadj: np.ndarray, adjncy: np.ndarray,
                edge_weights: Optional[np.ndarray], vertex_weights: np.ndarray,
                recursive: Optional[bool] = None) -> np.ndarray:
    """``pymetis.part_graph`` (int64 arrays, read in place): the part of every vertex.

    ``recursive``: ``True`` recursive bisection, ``False`` k-way, ``None`` pymetis's
    default (recursive bisection up to 8 parts, k-way above).
    """
    import pymetis

    options = pymetis.Options()
    options.seed = seed
    _, parts = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy),
                                  vweights=vertex_weights.reshape(-1), eweights=edge_weights,
                                  options=options, recursive=recursive)
    return np.asarray(parts, dtype=np.int64)


def vertex_weights(num_nodes: Dict[NodeType, int], trains: Dict[NodeType, np.ndarray]
                   ) -> np.ndarray:
    """``[total nodes, ncon]`` METIS vertex weights: one constraint per node type (in the
    order of ``num_nodes``) and, when any node trains, one for training nodes."""
    types = list(num_nodes)
    has_train = any(m.any() for m in trains.values())
    ncon = len(types) + int(has_train)
    weights = np.zeros((sum(num_nodes.values()), ncon), dtype=np.int64)
    lo = 0
    for i, node_type in enumerate(types):
        hi = lo + num_nodes[node_type]
        weights[lo:hi, i] = 1
        if has_train:
            weights[lo:hi, -1] = trains[node_type]
        lo = hi
    return weights


def _move_best(parts: np.ndarray, mask: np.ndarray, src: int, dst: int, need: int,
               xadj: np.ndarray, adj: np.ndarray) -> None:
    """Moves the ``need`` nodes of ``mask`` in ``src`` that cut the fewest edges to ``dst``."""
    movers = np.flatnonzero(mask & (parts == src))
    gain = move_gain(xadj, adj, parts, movers, src, dst)
    parts[movers[np.argsort(-gain, kind="stable")[:need]]] = dst


def _excess(parts: np.ndarray, mask: np.ndarray, num_parts: int, tolerance: float
            ) -> Tuple[int, int, int]:
    """``(fullest, emptiest, nodes to move)`` for the nodes of ``mask`` (0 moves: balanced)."""
    counts = np.bincount(parts[mask], minlength=num_parts)
    limit = max(int(np.ceil(int(mask.sum()) / num_parts * (1 + tolerance))), 1)
    src, dst = int(counts.argmax()), int(counts.argmin())
    need = int(min(counts[src] - limit, limit - counts[dst], counts[src] - counts[dst]))
    return src, dst, max(need, 0)


def balance_nodes(parts: np.ndarray, masks: Sequence[np.ndarray], xadj: np.ndarray,
                  adj: np.ndarray, num_parts: int, tolerance: float = 0.03) -> None:
    """Post-pass: at most ``(1 + tolerance)`` times its share of each group of nodes
    (``masks``: one per node type) per partition, moving boundary nodes (in place).

    METIS honours its balance constraints only approximately, more so on a coarsened
    graph whose vertices are clusters.
    """
    if num_parts == 1:
        return
    for mask in masks:
        for _ in range(4 * num_parts):
            src, dst, need = _excess(parts, mask, num_parts, tolerance)
            if need == 0:
                break
            _move_best(parts, mask, src, dst, need, xadj, adj)


def balance_train(parts: np.ndarray, train: np.ndarray, xadj: np.ndarray, adj: np.ndarray,
                  num_parts: int, tolerance: float = 0.05) -> None:
    """Post-pass after METIS: evens out training nodes across partitions (in place).

    METIS balances the train-node constraint only loosely on small or skewed graphs.
    While a partition holds more than ``(1 + tolerance)`` times its share, its train
    nodes that cut the fewest edges when moved go to the emptiest partition, and as
    many non-train nodes move back, so node counts stay as they were.
    """
    if not train.any() or num_parts == 1:
        return
    for _ in range(4 * num_parts):
        src, dst, need = _excess(parts, train, num_parts, tolerance)
        if need == 0:
            return
        _move_best(parts, train, src, dst, need, xadj, adj)
        _move_best(parts, ~train, dst, src, need, xadj, adj)


def random_parts(num_nodes: Dict[NodeType, int], trains: Dict[NodeType, np.ndarray],
                 num_parts: int, seed: int) -> Dict[NodeType, np.ndarray]:
    """Balanced random assignment: nodes are shuffled and dealt round robin.

    Training nodes (``trains``, one bool per node of each type) and the rest are dealt
    separately, so both are balanced.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for node_type, n in num_nodes.items():
        parts = np.empty(n, dtype=np.int64)
        train = trains[node_type]
        dealt = 0
        for group in (np.flatnonzero(train), np.flatnonzero(~train)):
            shuffled = rng.permutation(group)
            parts[shuffled] = (dealt + np.arange(shuffled.size)) % num_parts
            dealt += shuffled.size
        out[node_type] = parts
    return out
