"""Community-structured synthetic graphs (homogeneous and heterogeneous).

Nodes belong to communities; most edges stay inside a community, so METIS has
structure to find, and a community's class is learnable both from the node
features (a noisy class centroid) and from the neighbourhood.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData

_CHUNK = 1 << 20  # values drawn per block: bounds temporaries, fixes the random stream


def _communities(rng: np.random.Generator, num_nodes: int, num_communities: int
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random community per node, plus members grouped by community (for sampling)."""
    comm = rng.integers(0, num_communities, num_nodes)
    members = np.argsort(comm, kind="stable")
    starts = np.searchsorted(comm[members], np.arange(num_communities + 1))
    return comm, members, starts


def _pick_partners(rng: np.random.Generator, comm_of_src: np.ndarray, members: np.ndarray,
                   starts: np.ndarray, p_in: float) -> np.ndarray:
    """For each source, a node of its own community (prob. ``p_in``) or any node."""
    n = comm_of_src.size
    sizes = (starts[1:] - starts[:-1])[comm_of_src]
    inside = (rng.random(n) < p_in) & (sizes > 0)
    offset = (rng.random(n) * np.maximum(sizes, 1)).astype(np.int64)
    partner = rng.integers(0, members.size, n)
    partner[inside] = members[starts[comm_of_src[inside]] + offset[inside]]
    return partner


def _other_partners(rng: np.random.Generator, src: np.ndarray, comm: np.ndarray,
                    members: np.ndarray, starts: np.ndarray, rank: np.ndarray,
                    p_in: float) -> np.ndarray:
    """Like :func:`_pick_partners` for same-type edges, but never ``src`` itself.

    Inside the community, one of its other members; otherwise any other node.
    """
    lo = starts[comm[src]]
    size = starts[comm[src] + 1] - lo
    inside = (rng.random(src.size) < p_in) & (size > 1)
    offset = (rng.random(src.size) * np.maximum(size - 1, 1)).astype(np.int64)
    offset += offset >= rank[src] - lo  # skip src's own slot
    other = rng.integers(0, comm.size - 1, src.size)
    other += other >= src
    return np.where(inside, members[np.where(inside, lo + offset, 0)], other)


def _undirected_edges(rng: np.random.Generator, comm: np.ndarray, num_pairs: int,
                      p_in: float) -> torch.Tensor:
    """``[2, 2 * num_pairs]`` edge index: ``num_pairs`` loop-free pairs, then reversed."""
    members = np.argsort(comm, kind="stable")
    starts = np.searchsorted(comm[members], np.arange(comm.max() + 2))
    rank = np.empty_like(members)
    rank[members] = np.arange(members.size)
    edge_index = torch.empty((2, 2 * num_pairs), dtype=torch.long)
    out = edge_index.numpy()
    for lo in range(0, num_pairs, _CHUNK):
        hi = min(lo + _CHUNK, num_pairs)
        src = rng.integers(0, comm.size, hi - lo)
        dst = _other_partners(rng, src, comm, members, starts, rank, p_in)
        out[0, lo:hi], out[1, lo:hi] = src, dst
        out[0, num_pairs + lo:num_pairs + hi], out[1, num_pairs + lo:num_pairs + hi] = dst, src
    return edge_index


def _power_law_edges(rng: np.random.Generator, comm: np.ndarray, num_pairs: int,
                     p_in: float, exponent: float) -> torch.Tensor:
    """Like :func:`_undirected_edges`, but endpoints drawn with probability proportional
    to a Pareto weight per node (Chung-Lu): degrees follow a power law of ``exponent``
    up to the structural cut-off (weights at most ``sqrt(n)`` times the smallest).

    Both ends of a pair are weighted, the second inside the first's community with
    probability ``p_in``; a pair drawn as a self-loop moves its second end to the next
    node of the same community (or the next node)."""
    n = comm.size
    weight = (1.0 - rng.random(n)) ** (-1.0 / (exponent - 1.0))  # Pareto, minimum 1
    np.minimum(weight, np.sqrt(n), out=weight)  # structural cut-off: hubs stay below ~1% of n
    members = np.argsort(comm, kind="stable")
    starts = np.searchsorted(comm[members], np.arange(comm.max() + 2))
    cum = np.cumsum(weight[members])  # by community: community c is cum[starts[c]:starts[c+1]]
    before = np.concatenate([[0.0], cum])
    edge_index = torch.empty((2, 2 * num_pairs), dtype=torch.long)
    out = edge_index.numpy()
    for lo in range(0, num_pairs, _CHUNK):
        hi = min(lo + _CHUNK, num_pairs)
        src = members[np.minimum(np.searchsorted(cum, rng.random(hi - lo) * cum[-1], "right"),
                                 n - 1)]
        c = comm[src]
        inside = rng.random(hi - lo) < p_in
        a, b = before[starts[c]], before[starts[c + 1]]
        u = np.where(inside, a + rng.random(hi - lo) * (b - a), rng.random(hi - lo) * cum[-1])
        slot = np.minimum(np.searchsorted(cum, u, "right"), n - 1)
        dst = members[slot]
        loop = dst == src
        nxt = np.where(inside & (starts[c + 1] - starts[c] > 1),
                       starts[c] + (slot - starts[c] + 1) % np.maximum(starts[c + 1] - starts[c], 1),
                       (slot + 1) % n)
        dst[loop] = members[nxt[loop]]
        out[0, lo:hi], out[1, lo:hi] = src, dst
        out[0, num_pairs + lo:num_pairs + hi], out[1, num_pairs + lo:num_pairs + hi] = dst, src
    return edge_index


def _features(rng: np.random.Generator, labels: np.ndarray, num_classes: int, feat_dim: int,
              noise: float) -> torch.Tensor:
    """``centroid[label] + noise * N(0, 1)`` rows, filled in blocks (no full-size temporary)."""
    centroids = rng.standard_normal((num_classes, feat_dim), dtype=np.float32)
    x = np.empty((labels.size, feat_dim), dtype=np.float32)
    step = max(1, _CHUNK // max(feat_dim, 1))
    for lo in range(0, labels.size, step):
        block = x[lo:lo + step]
        rng.standard_normal(dtype=np.float32, out=block)
        block *= noise
        block += centroids[labels[lo:lo + step]]
    return torch.from_numpy(x)


def _split_masks(rng: np.random.Generator, n: int, train: float, val: float, test: float
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    u = rng.random(n)
    masks = (u < train, (u >= train) & (u < train + val),
             (u >= train + val) & (u < train + val + test))
    return tuple(torch.from_numpy(m) for m in masks)  # type: ignore[return-value]


def community_graph(num_nodes: int, avg_degree: float = 20.0, feat_dim: int = 100,
                    num_classes: int = 10, num_communities: int = 0, p_in: float = 0.85,
                    noise: float = 3.0, train: float = 0.1, val: float = 0.05,
                    test: float = 0.1, seed: int = 0, power_law: float = 0.0) -> Data:
    """An undirected homogeneous graph with ``num_nodes * avg_degree`` directed edges.

    ``round(num_nodes * avg_degree / 2)`` node pairs are drawn, never a node with
    itself (repeated pairs are possible), and stored in both directions: first every
    pair as drawn, then every pair reversed. Everything is generated in fixed-size
    blocks straight into the output tensors, so building the graph needs little more
    memory than the graph itself (2.4M nodes, 124M edges, 100 features: about
    2.8 GiB, ~3.3 GB peak RSS with torch loaded).

    Args:
        num_nodes (int): number of nodes.
        avg_degree (float): average in-degree (both directions of each edge stored).
        feat_dim (int): width of the float32 feature ``x``.
        num_classes (int): classes of ``y`` (community id modulo ``num_classes``).
        num_communities (int): communities (``0``: one per ~1000 nodes, at least
            ``num_classes``).
        p_in (float): probability an edge stays inside its community.
        noise (float): feature noise relative to the class centroids.
        train, val, test (float): fractions of nodes in each split mask.
        seed (int): random seed; the graph is a pure function of the arguments.
        power_law (float): ``0``: endpoints uniform within their community (degrees
            concentrated around the mean); ``> 2``: degrees follow a power law of this
            exponent (``2.5``: a heavy tail like ogbn-products', hubs of thousands).
    """
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    rng = np.random.default_rng(seed)
    num_communities = num_communities or max(num_classes, num_nodes // 1000)
    comm = rng.integers(0, num_communities, num_nodes)
    if power_law and power_law <= 2:
        raise ValueError(f"power_law must be 0 (off) or an exponent > 2, got {power_law}")
    pairs = int(round(num_nodes * avg_degree / 2))
    edge_index = (_power_law_edges(rng, comm, pairs, p_in, power_law) if power_law
                  else _undirected_edges(rng, comm, pairs, p_in))
    labels = comm % num_classes
    train_mask, val_mask, test_mask = _split_masks(rng, num_nodes, train, val, test)
    return Data(x=_features(rng, labels, num_classes, feat_dim, noise), edge_index=edge_index,
                y=torch.from_numpy(labels), train_mask=train_mask, val_mask=val_mask,
                test_mask=test_mask, num_nodes=num_nodes)


def hetero_community_graph(num_papers: int, avg_degree: float = 10.0, feat_dim: int = 32,
                           num_classes: int = 4, p_in: float = 0.85, noise: float = 3.0,
                           seed: int = 0) -> HeteroData:
    """A heterogeneous academic graph: papers, authors and institutions.

    Edge types: ``paper-cites-paper``, ``author-writes-paper``,
    ``paper-written_by-author`` (the reverse), ``author-affiliated_with-institution``
    and ``institution-employs-author``. Papers carry ``x``, ``y``, split masks and a
    ``time`` (year); authors and institutions carry ``x``. ``cites`` and ``writes``
    edges carry ``edge_time``; ``writes`` also a 2-d ``edge_attr`` and
    ``cites`` an ``edge_weight``.
    """
    rng = np.random.default_rng(seed)
    n_paper, n_author = num_papers, max(2, num_papers // 2)
    n_inst = max(2, num_papers // 50)
    n_comm = max(num_classes, num_papers // 500)
    p_comm, p_members, p_starts = _communities(rng, n_paper, n_comm)
    a_comm = rng.integers(0, n_comm, n_author)
    year = torch.from_numpy(rng.integers(2000, 2024, n_paper))
    data = HeteroData()
    labels = p_comm % num_classes
    data["paper"].x = _features(rng, labels, num_classes, feat_dim, noise)
    data["paper"].y = torch.from_numpy(labels)
    data["paper"].time = year
    masks = _split_masks(rng, n_paper, 0.3, 0.1, 0.2)
    data["paper"].train_mask, data["paper"].val_mask, data["paper"].test_mask = masks
    data["author"].x = _features(rng, a_comm % num_classes, num_classes, feat_dim, noise)
    data["institution"].x = torch.from_numpy(rng.standard_normal((n_inst, feat_dim),
                                                                 dtype=np.float32))

    cite_src = rng.integers(0, n_paper, int(n_paper * avg_degree))
    cite_dst = _pick_partners(rng, p_comm[cite_src], p_members, p_starts, p_in)
    cites = data["paper", "cites", "paper"]
    cites.edge_index = torch.from_numpy(np.stack([cite_src, cite_dst]))
    cites.edge_time = year[torch.from_numpy(cite_src)]
    cites.edge_weight = torch.from_numpy(rng.random(cite_src.size, dtype=np.float32))

    w_author = rng.integers(0, n_author, int(n_paper * 3))
    w_paper = _pick_partners(rng, a_comm[w_author], p_members, p_starts, p_in)
    writes = data["author", "writes", "paper"]
    writes.edge_index = torch.from_numpy(np.stack([w_author, w_paper]))
    writes.edge_time = year[torch.from_numpy(w_paper)]
    writes.edge_attr = torch.from_numpy(rng.standard_normal((w_author.size, 2),
                                                            dtype=np.float32))
    data["paper", "written_by", "author"].edge_index = writes.edge_index.flip(0)

    inst = torch.from_numpy(rng.integers(0, n_inst, n_author))
    authors = torch.arange(n_author)
    data["author", "affiliated_with", "institution"].edge_index = torch.stack([authors, inst])
    data["institution", "employs", "author"].edge_index = torch.stack([inst, authors])
    return data
