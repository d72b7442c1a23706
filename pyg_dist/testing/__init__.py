"""Helpers for your own tests of code that uses pyg_dist (like ``torch_geometric.testing``).

- :func:`run_ranks` runs a function on k local processes the way ``torchrun`` would
  (rendezvous, ``RANK``/``WORLD_SIZE``/... set, every exit code checked, a failing rank's
  traceback shown, nothing left running after the timeout); :func:`free_port` and
  :func:`torchrun_env` are its parts;
- :func:`encode_ids` writes every node's and edge's id into its features, so any rank can
  check what it fetched; :func:`khop_in_neighbourhood` is the ground truth of sampling
  computed on the unpartitioned graph.

::

    from pyg_dist.testing import run_ranks

    def check():                  # module level: children import it
        ctx = pyg_dist.DistContext.from_env()
        ...
        return ctx.rank

    assert run_ranks(check, 2, timeout=60) == [0, 1]

pyg_dist's own test machinery (fault injection, emulated machines, the spawn checks)
lives with its tests, not in the installed package.
"""
from pyg_dist.testing._graphs import encode_ids, khop_in_neighbourhood, typed
from pyg_dist.testing._launch import RanksFailed, free_port, run_ranks, torchrun_env

__all__ = ["run_ranks", "free_port", "torchrun_env", "RanksFailed", "encode_ids",
           "khop_in_neighbourhood", "typed"]
