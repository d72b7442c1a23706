"""Distributed neighbour sampling: local kernels, per-hop RPC, feature fetching."""
from pyg_dist.sampler._features import FeatureFetcher
from pyg_dist.sampler._labor_reference import LaborSample, labor_sample
from pyg_dist.sampler._local import LocalSampler
from pyg_dist.sampler._neighbor_sampler import DistNeighborSampler
from pyg_dist.sampler._serving import init_rpc
from pyg_dist.sampler._types import SampledSubgraph, SamplingConfig

__all__ = ["DistNeighborSampler", "LocalSampler", "FeatureFetcher", "SampledSubgraph",
           "SamplingConfig", "init_rpc", "LaborSample", "labor_sample"]
