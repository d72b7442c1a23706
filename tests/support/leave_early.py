"""A user's script that leaves every epoch early, batches still in flight, and exits.

    python tests/support/leave_early.py PARTITION_DIR NUM_WORKERS EPOCHS DELAY [close]

(under ``torchrun``, 2 ranks on 2 partitions). Each epoch ``break``s after its second
batch, with ``concurrency`` more batches in flight; the script then returns without
closing anything (with ``close``: ``loader.close()`` and ``shutdown_rpc()`` first, as
the examples do) and prints one JSON line. To keep requests in flight through the
exit, every RPC reply is handed to the sampler ``DELAY`` seconds late (the callback on
torch's RPC thread sleeps first: patched here, in this process and its sampler workers,
which import this file).
"""
from __future__ import annotations

import json
import sys
import time

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      init_process_group, node_split, shutdown_rpc)
from pyg_dist.rpc import _runtime as runtime

DELAY = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
_WRAP = runtime.wrap_future


def _late(fut, loop, on_error=None, convert=None):
    def slow(value):
        time.sleep(DELAY)
        return convert(value) if convert is not None else value
    return _WRAP(fut, loop, on_error, slow)


runtime.wrap_future = _late


def main(root: str, num_workers: int, epochs: int, close: bool) -> None:
    ctx = DistContext.from_env()
    init_process_group("gloo", ctx)
    pid = ctx.partition_id(num_parts=2)
    data = (LocalFeatureStore.from_partition(root, pid),
            LocalGraphStore.from_partition(root, pid))
    loader = DistNeighborLoader(data=data, num_neighbors=[10, 5], current_ctx=ctx,
                                input_nodes=node_split(data, "train", ctx), batch_size=8,
                                shuffle=True, num_workers=num_workers, concurrency=2)
    taken = 0
    for _ in range(epochs):
        for i, batch in enumerate(loader):
            taken += int(batch.batch_size)
            if i == 1:
                break
    if close:
        loader.close()
        shutdown_rpc()
    print(json.dumps({"rank": ctx.rank, "seeds": taken}), flush=True)


if __name__ == "__main__":  # sampler workers import this file again
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[5:6] == ["close"])
