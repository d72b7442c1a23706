"""Command-line tools, each a thin argument parser over the library, installed as console
scripts and runnable as ``python -m pyg_dist.cli.NAME`` (or under ``torchrun``):

- ``pyg-dist-partition`` (:mod:`pyg_dist.cli.partition`): partition a graph on disk;
- ``pyg-dist-chunk`` (:mod:`pyg_dist.cli.chunk`): write a graph as a chunked folder;
- ``pyg-dist-convert`` (:mod:`pyg_dist.cli.convert`): convert a
  ``torch_geometric.distributed`` partition folder;
- ``pyg-dist-verify`` (:mod:`pyg_dist.cli.verify`): check every file of a partition folder;
- ``pyg-dist-export`` (:mod:`pyg_dist.cli.export`): export a checkpointed model's outputs;
- ``pyg-dist-checkpoint`` (:mod:`pyg_dist.cli.checkpoint`): list, verify and choose
  checkpoint versions.

Bad input exits with code 2 and one line naming the problem.
"""
__all__ = ["partition", "chunk", "convert", "verify", "export", "checkpoint"]
