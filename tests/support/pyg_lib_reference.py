"""A reference implementation of pyg-lib's neighbour sampling ops, for tests only.

PyG's ``NeighborSampler`` (behind ``NeighborLoader`` and ``LinkNeighborLoader``) calls
``torch.ops.pyg.neighbor_sample`` / ``torch.ops.pyg.hetero_neighbor_sample`` from
pyg-lib, which cannot be installed here. This module implements the same two ops, with
pyg-lib's schema and output semantics, in plain (slow) Python, so tests can run PyG's
own loaders over two backends (the original ``Data``/``HeteroData`` and pyg_dist's
stores) and compare their batches. It is registered only by tests
(:func:`register_ops`, with ``torch_geometric.typing.WITH_PYG_LIB`` patched by a
fixture); nothing in the library uses it.

Semantics kept from pyg-lib (``pyg_lib/csrc/sampler/cpu/neighbor_kernel.cpp``):

* with ``csc=True`` the graph is ``(colptr, row)``: the neighbours of node ``v`` are
  ``row[colptr[v]:colptr[v + 1]]`` and the edge id of a neighbour is its position;
* sampled nodes start with the seeds, in order; each hop visits the nodes the previous
  hop added, in order, takes every neighbour if there are at most ``k`` (or ``k < 0``)
  and otherwise ``k`` distinct ones uniformly at random (with ``replace=True``, ``k``
  draws), and appends every newly seen node;
* outputs ``(row, col, node_id, edge_id, num_sampled_nodes_per_hop,
  num_sampled_edges_per_hop)``; ``row``/``col`` index into ``node_id``, with
  ``row`` the sampled neighbour and ``col`` the node it was sampled for (messages flow
  ``row -> col``, as PyG expects from CSC sampling);
* ``disjoint=True`` keeps one subgraph per seed: ``node_id`` is ``[N, 2]`` holding
  ``(seed index, node id)``.

``index_sort`` mirrors ``pyg_lib.ops.index_sort`` (a stable radix sort), which PyG's
``to_csc`` uses when pyg-lib is installed: tests patch it in with the ops.

Differences: randomness comes from torch's global generator (``torch.randperm`` /
``torch.randint``), not pyg-lib's engine, so results equal pyg-lib's in distribution,
not draw for draw; the heterogeneous op visits edge types in sorted order whatever order
it is given (PyG passes them in ``set`` order for remote backends), so the same graph
and seeds give the same sample. Node-level temporal sampling is disjoint only (as PyG
requires) and takes the neighbours not later than the subtree's seed time (the seed's
own node time when no seed time is given); edge-level temporal and weighted sampling
and ``directed=False`` raise :class:`NotImplementedError`.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

NEIGHBOR_SCHEMA = (
    "neighbor_sample(Tensor rowptr, Tensor col, Tensor seed, int[] num_neighbors, "
    "Tensor? node_time=None, Tensor? edge_time=None, Tensor? seed_time=None, "
    "Tensor? edge_weight=None, bool csc=False, bool replace=False, bool directed=True, "
    "bool disjoint=False, str temporal_strategy='uniform', bool return_edge_id=True) "
    "-> (Tensor, Tensor, Tensor, Tensor?, int[], int[])")
HETERO_SCHEMA = (
    "hetero_neighbor_sample(str[] node_types, (str, str, str)[] edge_types, "
    "Dict(str, Tensor) rowptr_dict, Dict(str, Tensor) col_dict, Dict(str, Tensor) seed_dict, "
    "Dict(str, int[]) num_neighbors_dict, Dict(str, Tensor)? node_time_dict=None, "
    "Dict(str, Tensor)? edge_time_dict=None, Dict(str, Tensor)? seed_time_dict=None, "
    "Dict(str, Tensor)? edge_weight_dict=None, bool csc=False, bool replace=False, "
    "bool directed=True, bool disjoint=False, str temporal_strategy='uniform', "
    "bool return_edge_id=True) -> (Dict(str, Tensor), Dict(str, Tensor), "
    "Dict(str, Tensor), Dict(str, Tensor)?, Dict(str, int[]), Dict(str, int[]))")

Key = Tuple[str, Hashable]  # (node type, node id or (seed index, node id))


def _check_supported(times: Sequence[object], directed: bool, csc: bool) -> None:
    if any(t is not None for t in times):
        raise NotImplementedError("the pyg-lib reference does not implement edge-level "
                                  "temporal or weighted sampling")
    if not directed:
        raise NotImplementedError("the pyg-lib reference implements directed sampling only")
    if not csc:
        raise NotImplementedError("the pyg-lib reference implements csc=True only (what "
                                  "PyG's NeighborSampler passes)")


def _pick(start: int, end: int, k: int, replace: bool,
          allowed: Optional[List[int]] = None) -> List[int]:
    """Positions of the sampled neighbours among ``[start, end)`` (``allowed``: only
    among these positions, in their order)."""
    pool = list(range(start, end)) if allowed is None else allowed
    deg = len(pool)
    if deg == 0 or k == 0:
        return []
    if k < 0 or (not replace and deg <= k):
        return pool
    if replace:
        return [pool[i] for i in torch.randint(deg, (k,)).tolist()]
    return [pool[i] for i in torch.randperm(deg)[:k].tolist()]


def _in_time(start: int, end: int, row: List[int], time: Optional[List[int]],
             seed_time: Optional[int]) -> Optional[List[int]]:
    """Node-level temporal sampling: the positions whose neighbour is not later than
    the subtree's seed time (PyG sorts each node's neighbours by time first, so pyg-lib
    takes a prefix: the same positions)."""
    if time is None or seed_time is None:
        return None
    return [e for e in range(start, end) if time[row[e]] <= seed_time]


class _Sampled:
    """Nodes seen so far (per node type) and the edges sampled (per relation)."""

    def __init__(self, node_types: Sequence[str], rels: Sequence[str]) -> None:
        self.index: Dict[Key, int] = {}
        self.nodes: Dict[str, List[Hashable]] = {t: [] for t in node_types}
        self.edges: Dict[str, List[Tuple[int, int, int]]] = {r: [] for r in rels}

    def add(self, node_type: str, key: Hashable) -> Tuple[int, bool]:
        """Local index of a node, and whether it is new."""
        if (node_type, key) in self.index:
            return self.index[(node_type, key)], False
        local = len(self.nodes[node_type])
        self.index[(node_type, key)] = local
        self.nodes[node_type].append(key)
        return local, True


def _hop(sampled: _Sampled, rel: str, src_type: str, frontier: List[Tuple[int, Hashable]],
         colptr: Tensor, row: Tensor, k: int, replace: bool, disjoint: bool,
         time: Optional[List[int]] = None, seed_times: Optional[List[int]] = None
         ) -> List[Tuple[int, Hashable]]:
    """Samples the in-neighbours (of type ``src_type``) of every frontier node; returns
    the newly seen source nodes as ``(local index, key)`` (``time``: the source nodes'
    times, ``seed_times``: every subtree's, for node-level temporal sampling)."""
    added: List[Tuple[int, Hashable]] = []
    ptr, nbr = colptr.tolist(), row
    rows = row.tolist() if time is not None else []
    for dst_local, key in frontier:
        v = key[1] if disjoint else key
        seed_time = seed_times[key[0]] if seed_times is not None and disjoint else None
        allowed = _in_time(ptr[v], ptr[v + 1], rows, time, seed_time)
        for e in _pick(ptr[v], ptr[v + 1], k, replace, allowed):
            w = int(nbr[e])
            src_key = (key[0], w) if disjoint else w
            src_local, new = sampled.add(src_type, src_key)
            if new:
                added.append((src_local, src_key))
            sampled.edges[rel].append((src_local, dst_local, e))
    return added


def _node_tensor(keys: List[Hashable], disjoint: bool) -> Tensor:
    if disjoint:
        return torch.tensor(keys, dtype=torch.int64).view(-1, 2)
    return torch.tensor(keys, dtype=torch.int64)


def _edge_tensors(edges: List[Tuple[int, int, int]]) -> Tuple[Tensor, Tensor, Tensor]:
    out = torch.tensor(edges, dtype=torch.int64).view(-1, 3)
    return out[:, 0].contiguous(), out[:, 1].contiguous(), out[:, 2].contiguous()


def neighbor_sample(rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: List[int],
                    node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                    seed_time: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None,
                    csc: bool = False, replace: bool = False, directed: bool = True,
                    disjoint: bool = False, temporal_strategy: str = "uniform",
                    return_edge_id: bool = True
                    ) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor], List[int], List[int]]:
    """``pyg::neighbor_sample`` (homogeneous): see the module docstring."""
    out = hetero_neighbor_sample(
        ["n"], [("n", "e", "n")], {"n__e__n": rowptr}, {"n__e__n": col}, {"n": seed},
        {"n__e__n": num_neighbors}, None if node_time is None else {"n": node_time},
        None if edge_time is None else {"n__e__n": edge_time},
        None if seed_time is None else {"n": seed_time},
        None if edge_weight is None else {"n__e__n": edge_weight},
        csc, replace, directed, disjoint, temporal_strategy, return_edge_id)
    rows, cols, nodes, edges, num_nodes, num_edges = out
    edge = None if edges is None else edges["n__e__n"]
    return (rows["n__e__n"], cols["n__e__n"], nodes["n"], edge, num_nodes["n"],
            num_edges["n__e__n"])


def hetero_neighbor_sample(
        node_types: List[str], edge_types: List[Tuple[str, str, str]],
        rowptr_dict: Dict[str, Tensor], col_dict: Dict[str, Tensor],
        seed_dict: Dict[str, Tensor], num_neighbors_dict: Dict[str, List[int]],
        node_time_dict: Optional[Dict[str, Tensor]] = None,
        edge_time_dict: Optional[Dict[str, Tensor]] = None,
        seed_time_dict: Optional[Dict[str, Tensor]] = None,
        edge_weight_dict: Optional[Dict[str, Tensor]] = None, csc: bool = False,
        replace: bool = False, directed: bool = True, disjoint: bool = False,
        temporal_strategy: str = "uniform", return_edge_id: bool = True) -> tuple:
    """``pyg::hetero_neighbor_sample``: see the module docstring. Dicts are keyed by node
    type and by ``"src__rel__dst"``; ``num_neighbors_dict`` gives one count per hop."""
    _check_supported((edge_time_dict, edge_weight_dict), directed, csc)
    if (node_time_dict or seed_time_dict) and not disjoint:
        raise NotImplementedError("the pyg-lib reference samples by time only disjointly")
    types = sorted(tuple(t) for t in edge_types)
    rels = ["__".join(t) for t in types]
    hops = max((len(num_neighbors_dict[r]) for r in rels), default=0)
    sampled = _Sampled(node_types, rels)
    frontier: Dict[str, List[Tuple[int, Hashable]]] = {t: [] for t in node_types}
    seed_times: List[int] = []
    subtree = 0  # every seed starts a subtree; numbered on over the seed types, as pyg-lib
    for node_type, seeds in seed_dict.items():
        for i, v in enumerate(seeds.tolist()):
            key = (subtree, v) if disjoint else v
            subtree += 1
            local, new = sampled.add(node_type, key)
            if new:
                frontier[node_type].append((local, key))
        if seed_time_dict is not None:
            seed_times += seed_time_dict[node_type].tolist()
        elif node_time_dict is not None:  # a seed's own time bounds its subtree
            seed_times += node_time_dict[node_type][seeds].tolist()
    times = {t: v.tolist() for t, v in (node_time_dict or {}).items()}
    num_nodes = {t: [len(sampled.nodes[t])] for t in node_types}
    num_edges: Dict[str, List[int]] = {r: [] for r in rels}
    for hop in range(hops):
        added: Dict[str, List[Tuple[int, Hashable]]] = {t: [] for t in node_types}
        for (src, _, dst), rel in zip(types, rels):
            before = len(sampled.edges[rel])
            if hop < len(num_neighbors_dict[rel]):
                added[src] += _hop(sampled, rel, src, frontier[dst], rowptr_dict[rel],
                                   col_dict[rel], num_neighbors_dict[rel][hop], replace,
                                   disjoint, times.get(src),
                                   seed_times if src in times else None)
            num_edges[rel].append(len(sampled.edges[rel]) - before)
        for t in node_types:
            num_nodes[t].append(len(added[t]))
        frontier = added
    rows, cols, eids = {}, {}, {}
    for rel in rels:
        rows[rel], cols[rel], eids[rel] = _edge_tensors(sampled.edges[rel])
    nodes = {t: _node_tensor(sampled.nodes[t], disjoint) for t in node_types}
    return rows, cols, nodes, (eids if return_edge_id else None), num_nodes, num_edges


def index_sort(inputs: Tensor, max_value: Optional[int] = None,
               stable: bool = False) -> Tuple[Tensor, Tensor]:
    """``pyg_lib.ops.index_sort``: pyg-lib sorts indices by radix sort, which is
    stable (ties keep their order); without pyg-lib PyG falls back to
    ``torch.sort(stable=False)``, which on CPU may reorder ties. PyG's ``to_csc`` sorts
    edges by destination with it, so a loader over a ``Data`` object samples from each
    node's neighbours in original edge id order only with pyg-lib's sort."""
    return inputs.sort(stable=True)


def register_ops() -> "torch.library.Library":
    """Registers both ops as ``torch.ops.pyg.*`` and returns the library handle (keep it
    alive while the ops are needed; ``handle._destroy()`` removes them).

    Raises:
        RuntimeError: if ``torch.ops.pyg`` already has the ops (pyg-lib is installed).
    """
    lib = torch.library.Library("pyg", "FRAGMENT")
    lib.define(NEIGHBOR_SCHEMA)
    lib.define(HETERO_SCHEMA)
    lib.impl("neighbor_sample", neighbor_sample, "CompositeExplicitAutograd")
    lib.impl("hetero_neighbor_sample", hetero_neighbor_sample, "CompositeExplicitAutograd")
    return lib


@contextmanager
def reference_ops() -> Iterator[None]:
    """PyG's samplers on these ops: the ops registered, ``index_sort`` patched in, and
    PyG told pyg-lib is there; all undone on exit. Where pyg-lib itself is installed,
    its own ops and sort are used as they are (the same semantics)."""
    try:
        lib = register_ops()
    except RuntimeError:  # pyg-lib is installed: its ops are defined
        yield
        return
    import torch_geometric.sampler.utils
    import torch_geometric.typing
    try:
        with _patched(torch_geometric.typing, torch_geometric.sampler.utils):
            yield
    finally:
        lib._destroy()


@contextmanager
def _patched(typing_module, utils_module) -> Iterator[None]:
    flags = ("WITH_PYG_LIB", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE", "WITH_WEIGHTED_NEIGHBOR_SAMPLE")
    saved = [getattr(typing_module, f) for f in flags], utils_module.index_sort
    for flag in flags:
        setattr(typing_module, flag, True)
    utils_module.index_sort = index_sort  # PyG's to_csc sorts with pyg-lib's stable sort
    try:
        yield
    finally:
        for flag, value in zip(flags, saved[0]):
            setattr(typing_module, flag, value)
        utils_module.index_sort = saved[1]
