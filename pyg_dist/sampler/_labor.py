"""Layer-neighbour (LABOR) sampling: one hop, on one partition (kernels in
:mod:`pyg_dist.sampler._labor_kernels`: numba, ``nogil``).

LABOR (Balin and Catalyurek, NeurIPS 2023) gives every candidate vertex ``t`` one
random variate ``r_t`` in ``(0, 1)`` per batch and layer, shared by every seed of the
batch. With *sequential Poisson sampling* (as GraphBolt's ``LayerNeighborSampler``),
each seed ``s`` keeps exactly ``min(k, deg(s))`` in-neighbours: those with the
smallest ``r_t`` (with edge weights ``w``: the smallest ``r_t / w_t``; zero-weight
edges are never drawn). Each seed's draw is uniform (a uniform random ``k``-subset),
but seeds whose neighbourhoods overlap pick the *same* vertices, so a batch holds far
fewer distinct nodes than neighbour sampling with the same fan-out.

``r_t`` is a hash, not a stream: SplitMix64's output function of
``hop seed + (key(t) + 1) * golden``, where ``key(t)`` is ``t``'s **original** id
(the dataset's; identical on every partition and in
:func:`~pyg_dist.sampler._labor_reference.labor_sample`, whatever the partitioning),
and the hop seed mixes the batch's random seed, the layer (unless
``layer_dependency``) and the node type (:func:`type_seed`). Every partition
therefore draws the seeds it owns exactly as one machine would, with no
communication. Ties (the same ``r`` for two edges: a repeated edge) are broken by
the source's original id, then the edge's original id: the picks and their order
(ascending ``r / w``) depend on nothing a partitioning changes.

Partitions store relabelled source ids, so the sampler keeps, per edge type, the
original id of every stored edge's source (:func:`source_keys`; 4 bytes per edge
where ids fit in int32, else 8), built on first use in each sampling process.
"""
from __future__ import annotations

import zlib
from typing import Callable, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist._madvise import empty_large
from pyg_dist.sampler._checks import check_csc, check_sample_args, check_values_out
from pyg_dist.sampler._labor_kernels import gather_drawn, labor_fill
from pyg_dist.sampler._sample_kernels import SampledHop

__all__ = ["GOLDEN", "mix64", "batch_seed", "hop_seed", "type_seed",
           "variates", "sample_labor_hop", "tie_words", "key_dtype", "source_keys"]

#: SplitMix64's increment (2^64 / golden ratio)
GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
_GOLD = np.uint64(GOLDEN)
_SCALE = 1.0 / 9007199254740992.0  # 2^-53
_NO_WEIGHTS = torch.empty(0, dtype=torch.float64)  # float64, as weights: one signature
_NO_VALUES = np.empty(0, dtype=np.int64)  # no buffer to draw edge ids into


def mix64(z: int) -> int:
    """SplitMix64's output function (a bijection of 64-bit words), on Python ints."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def batch_seed(rng: np.random.Generator) -> int:
    """The batch's random seed, drawn from the batch's generator (the sampler draws it
    first, before anything else of the batch)."""
    return int(rng.integers(0, 2**63))


def hop_seed(seed: int, layer: int, layer_dependency: bool = False) -> int:
    """The seed of layer ``layer`` (0-based) of a batch with random seed ``seed``; every
    layer shares one with ``layer_dependency``."""
    return mix64(int(seed) + GOLDEN * (0 if layer_dependency else int(layer) + 1))


def type_seed(seed: int, node_type: str) -> int:
    """The seed of one node type's variates in a hop with seed ``seed`` (vertices of
    different types with the same id get independent variates)."""
    return mix64(int(seed) ^ zlib.crc32(node_type.encode()))


def variates(keys: np.ndarray, seed: int) -> np.ndarray:
    """``r`` in ``(0, 1)`` (float64) of vertices with original ids ``keys`` under a
    :func:`type_seed` ``seed``: numpy's twin of the kernels' hash (the same bits)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed & _MASK) + (keys.astype(np.uint64) + np.uint64(1)) * _GOLD
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) * _SCALE


def sample_labor_hop(indptr: Tensor, indices: Tensor, keys: Tensor, seeds: Tensor,
                     fanout: int, seed: int, weights: Optional[Tensor] = None,
                     edge_ids: Optional[Tensor] = None, edge_values: bool = False,
                     values_out: Optional[Tensor] = None) -> SampledHop:
    """LABOR-samples in-neighbours of local destination rows ``seeds``.

    Args:
        indptr (Tensor): CSC row pointer over local destination rows (int64).
        indices (Tensor): global source id of every stored edge.
        keys (Tensor): original id of every stored edge's source (int64 or int32).
        seeds (Tensor): local rows to sample for.
        fanout (int): neighbours per seed; ``-1`` takes all (ordered by variate).
        seed (int): the hop's seed for the sources' node type (:func:`type_seed`).
        weights (Tensor, optional): per-edge float64 weight (``0`` = never).
        edge_ids (Tensor, optional): original id of every stored edge (int64 or int32):
            breaks ties; default: CSC positions.
        edge_values (bool): also return ``edge_ids`` at the drawn edges (int64).
        values_out (Tensor, optional): a contiguous 1-D int64 buffer: when the draw fits,
            those ids are its front (a view: the caller's concatenation copies nothing).

    Returns:
        :class:`~pyg_dist.sampler._sample_kernels.SampledHop`, each seed's edges ascending by
        ``r / w``.
    """
    check_csc(indptr, indices)
    num_edges = indices.numel()
    check_sample_args(indptr.numel() - 1, num_edges, seeds, fanout, weights, None, None,
                      "uniform")
    for name, t in (("keys", keys), ("edge_ids", edge_ids)):
        if t is not None and (t.numel() != num_edges or t.dtype not in (torch.int64,
                                                                        torch.int32)):
            raise ValueError(f"{name} must hold one int64 or int32 per edge ({num_edges}), "
                             f"got {t.dtype} of shape {tuple(t.shape)}")
    ties = tie_words(edge_ids if edge_ids is not None else torch.arange(num_edges))
    w = weights.reshape(-1).to(torch.float64) if weights is not None else _NO_WEIGHTS
    counts, pos = labor_fill(indptr.numpy(), keys.numpy(), ties, w.numpy(),
                             seeds.long().contiguous().numpy(), int(fanout),
                             np.uint64(int(seed) & _MASK), weights is not None)
    out = _NO_VALUES
    if values_out is not None and edge_values:
        check_values_out(values_out)
        out = values_out.numpy()
    nbrs, got = gather_drawn(indices.numpy(), ties, pos, bool(edge_values), out)
    return SampledHop(torch.from_numpy(counts), torch.from_numpy(nbrs), torch.from_numpy(pos),
                      torch.from_numpy(got) if edge_values else None)


def tie_words(ids: Tensor) -> Tuple[np.ndarray, bool]:
    """Edge ids as the kernels take them: ``(int32 words, wide)``, an int64 table viewed
    as two words per id (no copy), so both dtypes share one compiled kernel."""
    wide = ids.dtype == torch.int64
    ids = ids.contiguous()  # a strided array would compile another kernel
    return (ids.view(torch.int32) if wide else ids).numpy(), wide


def key_dtype(num_nodes: int) -> torch.dtype:
    """The dtype of :func:`source_keys` of a node type of ``num_nodes`` nodes: int32 below
    2^31 nodes (half the bytes read per candidate), else int64."""
    return torch.int32 if num_nodes < 2**31 else torch.int64


def source_keys(to_original: Callable[[Tensor], Tensor], indices: Tensor, num_nodes: int,
                chunk: int = 1 << 22) -> Tensor:
    """The original id of every stored edge's source (what :func:`sample_labor_hop`
    hashes), translated ``chunk`` edges at a time (bounded temporaries).

    Args:
        to_original: relabelled -> original ids of the sources' node type (any owner).
        indices (Tensor): the stored edges' relabelled source ids.
        num_nodes (int): nodes of the sources' type (int32 keys when they fit).
    """
    dtype = key_dtype(num_nodes)
    out = empty_large((indices.numel(),), dtype)  # read at random: huge pages help
    for lo in range(0, indices.numel(), chunk):
        out[lo:lo + chunk] = to_original(indices[lo:lo + chunk].long()).to(dtype)
    return out
