"""Inference over every node of a partitioned graph, and export of the results.

:func:`infer` is the entry: :func:`layerwise` computes every node's output exactly, one
layer at a time; :func:`sampled` on sampled neighbourhoods, each node once;
:func:`export` writes the result by original node id (:mod:`.manifest`);
:mod:`pyg_dist.inference._spec` says which models it can split. ``DistTensor`` rows and
loader seeds are indexed by relabelled ids only in :mod:`pyg_dist.inference._tensor_rows`.
"""
from pyg_dist.inference._entry import infer
from pyg_dist.inference._export import export
from pyg_dist.inference._layerwise import layerwise
from pyg_dist.inference._export_manifest import ExportFormatError, iter_export, read_export
from pyg_dist.inference._sampled import sampled
from pyg_dist.inference._spec import LayerwiseSpec, NotLayerwiseError, spec_of

__all__ = ["infer", "layerwise", "sampled", "LayerwiseSpec", "NotLayerwiseError", "spec_of",
           "export", "read_export", "iter_export", "ExportFormatError"]
