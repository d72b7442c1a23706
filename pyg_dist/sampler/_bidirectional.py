"""``subgraph_type="bidirectional"``, as PyG defines it: every sampled edge also stands
reversed in the batch, once.

PyG samples directionally and then converts (``SamplerOutput.to_bidirectional``); this
does the same to a sampled subgraph, with the same result:

- homogeneous: the edges and their reverses, duplicates removed, ordered by destination
  then source; each keeps an edge id: its own where it was sampled, else the id of the
  sampled edge it reverses (PyG keeps either where both were sampled);
- heterogeneous: an edge type whose reverse type was sampled (``(dst, "rev_" + rel,
  src)``, else the only type from ``dst`` to ``src``) gets the union of both, and a
  ``"rev_"`` type the transpose of that; a type from a node type to itself without
  one, its own reverses. Edge ids are dropped for those types (PyG sets them to
  ``None``); a type with no reverse stays as sampled, with a warning.

Either way ``num_sampled_nodes``/``num_sampled_edges`` no longer describe the edges
(PyG sets them to ``None``): they are left empty.
"""
from __future__ import annotations

import dataclasses
import warnings
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist.sampler._types import SampledSubgraph
from pyg_dist._typing import EdgeType


def _union(row: Tensor, col: Tensor, rev_row: Tensor, rev_col: Tensor,
           num_src: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(row, col)`` and the transposed ``(rev_row, rev_col)``, each pair once, sorted
    by ``col`` then ``row``; and for each kept pair its position in the concatenation:
    the first of equal pairs, so a pair sampled as it is keeps its own edge. (PyG's
    coalesce keeps "any" of them: which one is not defined.)"""
    r, c = torch.cat([row, rev_col]), torch.cat([col, rev_row])
    m, num_src = r.numel(), max(num_src, 1)
    pair = c * num_src + r
    if m and (int(c.max()) + 1) * num_src * m < 2**63:
        # one sort of distinct keys (pair, position): numpy's sort of plain integers is
        # ~2x faster than a stable sort with its permutation
        keyed = torch.from_numpy(np.sort((pair * m + torch.arange(m)).numpy()))
        pair, order = keyed // m, keyed % m
    else:
        pair, order = torch.sort(pair, stable=True)
    first = torch.ones_like(pair, dtype=torch.bool)
    first[1:] = pair[1:] != pair[:-1]
    kept = order[first]
    return r[kept], c[kept], kept


def _reverse_type(edge_type: EdgeType, types: List[EdgeType]) -> Optional[EdgeType]:
    src, rel, dst = edge_type
    named = (dst, f"rev_{rel}", src)
    if named in types:
        return named
    if src == dst:
        return None
    between = [t for t in types if (t[0], t[2]) == (dst, src)]
    return between[0] if len(between) == 1 else None


def bidirectional(sub: SampledSubgraph, hetero: bool) -> SampledSubgraph:
    """The bidirectional variant of ``sub`` (see the module's docstring)."""
    row, col = dict(sub.row), dict(sub.col)
    edge = dict(sub.edge)
    original = dict(sub.original_edge) if sub.original_edge is not None else None
    types = list(sub.row)
    if not hetero:
        (t,) = types
        row[t], col[t], kept = _union(row[t], col[t], row[t], col[t], sub.node[t[0]].numel())
        edge[t] = torch.cat([edge[t], edge[t]])[kept]
        if original is not None:
            original[t] = torch.cat([original[t], original[t]])[kept]
    else:
        untouched: Dict[EdgeType, bool] = defaultdict(lambda: True)
        for t in (t for t in types if not t[1].startswith("rev_")):
            rev = _reverse_type(t, types)
            if rev is None and t[0] != t[2]:
                warnings.warn(f"subgraph_type='bidirectional': edge type {t} has no reverse "
                              f"edge type in the graph; its edges stay directional",
                              stacklevel=3)
                continue
            rev = rev or t
            num_src = sub.node[t[0]].numel() if t[0] in sub.node else 0
            row[t], col[t], _ = _union(sub.row[t], sub.col[t], sub.row[rev], sub.col[rev],
                                       num_src)
            untouched[t] = False
            if rev != t and rev[1].startswith("rev_"):  # a "rev_" type: its transpose
                row[rev], col[rev] = col[t], row[t]
                untouched[rev] = False
        for t in types:
            if not untouched[t]:
                edge.pop(t, None)
                if original is not None:
                    original.pop(t, None)
    return dataclasses.replace(sub, row=row, col=col, edge=edge, original_edge=original,
                               num_sampled_nodes={}, num_sampled_edges={})
