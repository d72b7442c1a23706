"""Inference over every node of a partitioned graph, and export of the results.

:func:`infer` is the entry: :func:`layerwise` computes every node's output exactly, one
layer at a time; :func:`sampled` on sampled neighbourhoods, each node once;
:func:`export` writes the result by original node id (:mod:`.manifest`);
:mod:`pyg_dist.inference.spec` says which models it can split. ``DistTensor`` rows and
loader seeds are indexed by relabelled ids only in :mod:`pyg_dist.inference.rows`.
"""
from pyg_dist.inference.entry import infer
from pyg_dist.inference.export import export
from pyg_dist.inference.layerwise import layerwise
from pyg_dist.inference.manifest import ExportFormatError, iter_export, read_export
from pyg_dist.inference.sampled import sampled
from pyg_dist.inference.spec import LayerwiseSpec, NotLayerwiseError, spec_of

__all__ = ["infer", "layerwise", "sampled", "LayerwiseSpec", "NotLayerwiseError", "spec_of",
           "export", "read_export", "iter_export", "ExportFormatError"]
