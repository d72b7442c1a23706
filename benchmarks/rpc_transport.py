"""RPC transport benchmark: what TensorPipe's shared-memory transport costs and gives.

Two ranks on this machine join pyg_dist's RPC group once per transport setting
(the default, TCP between processes of one machine; and ``PYG_DIST_RPC_SHM=1``,
TensorPipe's defaults with its shared-memory transport) and measure, in one run:

- ``idle_cpu_s``: CPU seconds each rank's process uses while it sleeps ``--idle`` s after
  joining (no RPC traffic): the shared-memory transport's reactor thread polls its ring
  buffers without sleeping, so each process with it keeps a core busy;
- ``round_trip_us``: median microseconds of a small synchronous call to the other rank
  (``--calls`` calls);
- ``mb_per_s``: a ``--tensor-mb`` float32 tensor fetched from the other rank
  (``--tensor-repeats`` times, the best).

Seeds/s of sampling with features under each setting come from
``PYG_DIST_RPC_SHM=1 python benchmarks/sampling.py --setting dist`` against the
default. Prints ONE JSON line.

Example:
    python benchmarks/rpc_transport.py --idle 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETTINGS = {"tcp": {"PYG_DIST_RPC_SHM": "0"}, "shm": {"PYG_DIST_RPC_SHM": "1"}}


def _tensor(mb: float) -> torch.Tensor:
    return torch.ones(int(mb * (1 << 20)) // 4)


def _job(idle: float, calls: int, tensor_mb: float, repeats: int) -> Dict[str, float]:
    import torch.distributed.rpc as rpc

    from pyg_dist.rpc import DistContext, current, join_rpc, shutdown_rpc

    ctx = DistContext.from_env()
    join_rpc(ctx, ctx.world_size)
    other = current().worker_name(1 - ctx.rank)
    try:
        cpu = time.process_time()
        time.sleep(idle)
        out = {"idle_cpu_s": time.process_time() - cpu}
        rpc.rpc_sync(other, abs, args=(1,))  # pipes are connected before timing
        laps: List[float] = []
        for _ in range(calls):
            start = time.perf_counter()
            rpc.rpc_sync(other, abs, args=(1,))
            laps.append(time.perf_counter() - start)
        out["round_trip_us"] = 1e6 * statistics.median(laps)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            got = rpc.rpc_sync(other, _tensor, args=(tensor_mb,))
            best = min(best, time.perf_counter() - start)
        assert got.numel() == int(tensor_mb * (1 << 20)) // 4
        out["mb_per_s"] = tensor_mb / best
        return out
    finally:
        shutdown_rpc()


def main(argv: List[str] = None) -> None:
    from pyg_dist.testing import run_ranks

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle", type=float, default=5.0, help="seconds each rank sleeps")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--tensor-mb", type=float, default=64.0)
    p.add_argument("--tensor-repeats", type=int, default=5)
    args = p.parse_args(argv)
    result: Dict[str, object] = {"benchmark": "rpc_transport", "idle_s": args.idle,
                                 "calls": args.calls, "tensor_mb": args.tensor_mb,
                                 "cores": os.cpu_count()}
    for name, env in SETTINGS.items():
        outs = run_ranks(_job, 2, args.idle, args.calls, args.tensor_mb, args.tensor_repeats,
                         timeout=300, extra_env={"OMP_NUM_THREADS": "1", **env},
                         start_method="spawn")
        result[name] = {key: [round(o[key], 2) for o in outs] for key in outs[0]}
        print(f"{name}: {result[name]}", flush=True)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
