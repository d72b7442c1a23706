"""What a loader's seed arguments resolve to, before the loader is built.

A loader resolves its seeds first (:meth:`LoaderInput` subclasses of the node and link
loaders) and hands the result to :class:`~pyg_dist.loader._base.DistLoader`, so the
base class never calls into a subclass that is not set up yet. Resolving never raises
on bad input: it keeps the error, and building the loader raises it on every rank
(one rank's bad seeds are every rank's error, in the same exchange).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from torch import Tensor
from torch_geometric.sampler import NegativeSampling

from pyg_dist.rpc._context import DistContext
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._original_ids import PartIds
from pyg_dist._typing import EdgeType, NodeType

__all__ = ["LOCAL_ERRORS", "LoaderInput"]

#: errors of bad arguments on one rank, which building a loader raises on every rank
LOCAL_ERRORS = (ValueError, TypeError, KeyError, IndexError, NotImplementedError)

Stores = Tuple[LocalFeatureStore, LocalGraphStore]


@dataclass
class LoaderInput(ABC):
    """A loader's seeds, resolved from its arguments (original ids; relabelled ids once
    :meth:`translate` ran).

    Args:
        kind (str): ``"node"`` or ``"link"``.
        input_type: node type (node batches) or edge type (link batches) of the seeds.
        num_seeds (int): seeds this rank holds.
        neg_sampling (NegativeSampling, optional): negative sampling of link batches.
        table (PartIds, optional): the partition's id tables, when resolving read them.
        error (Exception, optional): what resolving raised (bad arguments); the
            loader raises it on every rank.
    """
    kind: str
    input_type: Optional[Union[NodeType, EdgeType]] = None
    num_seeds: int = 0
    neg_sampling: Optional[NegativeSampling] = None
    table: Optional[PartIds] = None
    error: Optional[BaseException] = None

    @abstractmethod
    def translate(self, table: PartIds, data: Stores, ctx: DistContext) -> None:
        """Translates the seeds to relabelled ids (collective: every rank calls it, once
        every rank resolved its seeds without error)."""

    @abstractmethod
    def inputs(self, positions: Tensor) -> Any:
        """The sampler input (``NodeSamplerInput``/``EdgeSamplerInput``) of the seeds at
        ``positions``."""

    @property
    @abstractmethod
    def seed_ids(self) -> Tensor:
        """The seeds as original ids (what a loader state's digest covers)."""
