"""Imported once by a fork server before it forks anything: loads pyg_dist's numba
kernels, so that every process forked from it starts with them.

Two fork servers import it: the one a trainer starts for its sampler workers
(:data:`pyg_dist.loader._workers.PRELOAD`) and the test suite's
(:data:`pyg_dist.testing._launch.PRELOAD`). Every process that samples calls
:func:`~pyg_dist.sampler._warmup.warm_up` before joining RPC; from numba's on-disk cache
that still takes about a second of CPU per process, and with an empty cache (a clean
install) it compiles every kernel. Done here, it happens once per server. Numba compiles
nothing in parallel, so the server starts no threads and the fork is safe. LABOR's
kernels are not among them: a LABOR job's worker loads them itself before joining
(:func:`~pyg_dist.sampler._warmup.warm_up_for`), from the cache its trainer filled.
"""
from __future__ import annotations

import sys

from pyg_dist.sampler._warmup import warm_up

try:
    warm_up()
except Exception as exc:  # the server must start regardless: each child warms up itself
    print(f"pyg_dist.loader._preload: warm_up failed ({exc!r}); forked processes will "
          "warm up on their own", file=sys.stderr)
