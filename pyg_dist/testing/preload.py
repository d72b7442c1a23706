"""Imported once by the test fork server (:data:`pyg_dist.testing.launch.PRELOAD`): loads
pyg_dist's numba kernels, so that the processes it forks start with them.

Every process that samples calls :func:`pyg_dist.sampler.warmup.warm_up` before joining
RPC; from numba's on-disk cache that still takes about a second of CPU per process, and
in a clean clone the first processes compile every kernel. Done here, it happens once per
test session. Numba compiles nothing in parallel, so the server forks no threads.
"""
from __future__ import annotations

import sys

from pyg_dist.sampler.warmup import warm_up

try:
    warm_up()
except Exception as exc:  # the server must start regardless: each child warms up itself
    print(f"pyg_dist.testing.preload: warm_up failed ({exc!r}); forked processes will "
          "warm up on their own", file=sys.stderr)
