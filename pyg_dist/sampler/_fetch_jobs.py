"""The pieces of one feature fetch: per node or edge type a :class:`Job` (ids, where
they are owned, the outputs), cut into :class:`Share` s by owner, and the requests in
flight (:class:`Pending`). Pure bookkeeping for :mod:`pyg_dist.sampler._features`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

from torch import Tensor

from pyg_dist.format._book import RangeBook
from pyg_dist.rpc._routing import group_by_owner
from pyg_dist.sampler._checks import RowLayout
from pyg_dist.sampler._node_index import NodeIndex
from pyg_dist.sampler._gather import Rows
from pyg_dist.sampler._types import FeatureRequest
from pyg_dist._typing import EdgeType, NodeType

Group = Union[NodeType, EdgeType]


@dataclass
class Share:
    """The ids of one request owned by one partition, and the output rows they fill."""
    part: int
    ids: Tensor
    rows: Rows


@dataclass
class Job:
    """One node or edge type to fetch: which ids, from where, into which outputs."""
    kind: str                   # "nodes" or "edges"
    group: Group
    attrs: List[str]
    shares: List[Share]
    num_rows: int               # rows fetched (unique ids when deduplicated)
    inverse: Optional[Tensor]   # output row i = fetched row inverse[i] (None: identity)
    out: Dict[str, Tensor] = field(default_factory=dict)
    cached: Optional[Tuple[Tensor, Tensor]] = None  # (output rows, cache rows) served here


@dataclass
class Pending:
    """One request in flight: the rank it went to, what it asked, and where rows go."""
    rank: int
    request: FeatureRequest
    pieces: List[Tuple[Job, Share]]
    future: object
    wired: bool = False  # some attributes asked in their wire type


def dedupe(ids: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
    """Distinct ids in order of first appearance, and the inverse (``None`` if the ids
    were already distinct)."""
    index = NodeIndex(ids.numel())
    inverse = index.insert(ids)
    if len(index) == ids.numel():
        return ids, None
    return index.keys, inverse


def owner_shares(ids: Tensor, book: RangeBook) -> List[Share]:
    """Splits ``ids`` by owner (raises if an id is outside the book)."""
    if ids.numel() == 0:
        return []
    owners = group_by_owner(ids, book.offsets, book.name)
    if len(owners) == 1:  # all rows in order: the output rows are a range
        return [Share(owners[0][0], ids, (0, ids.numel()))]
    return [Share(part, owned, pos) for part, pos, owned in owners]


def cut_share(share: Share, rows_per_piece: int) -> List[Share]:
    """Cuts a share into pieces of at most ``rows_per_piece`` rows."""
    n = share.ids.numel()
    if n <= rows_per_piece:
        return [share]
    out = []
    for lo in range(0, n, rows_per_piece):
        hi = min(lo + rows_per_piece, n)
        rows = ((share.rows[0] + lo, share.rows[0] + hi) if isinstance(share.rows, tuple)
                else share.rows[lo:hi])
        out.append(Share(share.part, share.ids[lo:hi], rows))
    return out




def layouts(jobs: List[Job]) -> Dict[Tuple[str, Group, str], RowLayout]:
    """Row shape and dtype of every attribute fetched (as allocated for the output)."""
    return {(job.kind, job.group, attr): RowLayout(tuple(out.shape[1:]), out.dtype)
            for job in jobs for attr, out in job.out.items()}
