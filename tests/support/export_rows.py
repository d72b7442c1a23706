"""A minimal export job for the kill walk: every node's row is ``[VALUE, VALUE]``.

    python tests/support/export_rows.py PARTITION_DIR OUT VALUE

(under ``torchrun``, one rank per partition or more); exports with ``overwrite=True``.
"""
from __future__ import annotations

import sys

import torch

from pyg_dist import (DistContext, LocalFeatureStore, LocalGraphStore, init_process_group,
                      init_rpc, shutdown_rpc)
from pyg_dist.embedding import DistTensor
from pyg_dist.format import _partition_io as io
from pyg_dist.inference import export


def main(root: str, out: str, value: float) -> None:
    ctx = DistContext.from_env()
    init_process_group("gloo", ctx)
    meta = io.read_meta(root)
    pid = ctx.partition_id(meta.num_parts)
    init_rpc(ctx, (LocalFeatureStore.from_partition(root, pid),
                   LocalGraphStore.from_partition(root, pid)))
    total = meta.num_nodes[meta.node_types[0]]
    rows = DistTensor((total, 2), torch.float32, name="walk", partition=meta,
                      init_func=lambda shape, dtype: torch.full(shape, value, dtype=dtype))
    export(rows, root, out, overwrite=True, ctx=ctx)
    shutdown_rpc()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
