"""A small training-shaped job for the restart tests (run by ``torchrun``, not pytest).

Every rank forms pyg_dist's RPC group, samples its share of Cora's training nodes
with full fan-out (so every batch has one right answer), runs an ``all_reduce`` per
batch like DDP's backward, and writes what it sampled to
``OUT/inc<restart>_rank<rank>.json``: its seeds (original ids, as ``node_split`` gives them), and per batch the
original ids (``nid``/``oid`` of an id-encoded graph) of the seeds and of the nodes and
edges the batch holds.

``--fault kill|stop`` makes rank 1 SIGKILL or SIGSTOP itself after ``--fault-after``
batches, once per job; ``--fault agent`` makes it SIGKILL its torchrun agent instead
(the store's host), leaving the trainers orphaned (``OUT/fault.done`` marks it done: with c10d rendezvous on several
machines, a machine restarted for another's loss keeps ``TORCHELASTIC_RESTART_COUNT``).
``--idle-after-fault S`` makes every rank sleep ``S`` seconds after each batch once the
fault is done: orphans still train (batches, ``all_reduce``, sampler workers) while they
wait for the watchdog, without keeping the cores busy for that minute.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist

from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                      init_process_group, node_split, shutdown_rpc)
from pyg_dist.format import _partition_io as io


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--fault", choices=["none", "kill", "stop", "agent"], default="none")
    parser.add_argument("--fault-after", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--idle-after-fault", type=float, default=0.0)
    args = parser.parse_args()

    ctx = DistContext.from_env()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    out = Path(args.out)
    (out / f"inc{restart}_rank{ctx.rank}.started").touch()
    init_process_group("gloo", ctx)
    pid = ctx.partition_id(io.read_meta(Path(args.parts)).num_parts)
    data = (LocalFeatureStore.from_partition(args.parts, pid),
            LocalGraphStore.from_partition(args.parts, pid))
    ids = node_split(data, "train", ctx)
    loader = DistNeighborLoader(data=data, num_neighbors=[-1, -1], input_nodes=ids,
                                batch_size=16, shuffle=False, num_workers=args.num_workers,
                                current_ctx=ctx)
    batches = []
    for i, batch in enumerate(b for _ in range(args.epochs) for b in loader):
        dist.all_reduce(torch.ones(1))  # like DDP's backward: every rank, every batch
        batches.append({"seeds": batch.nid[:batch.batch_size].tolist(),
                        "nid": sorted(batch.nid.tolist()), "oid": sorted(batch.oid.tolist())})
        print(f"rank {ctx.rank} incarnation {restart} batch {i}", flush=True)
        if args.fault != "none" and ctx.rank == 1 and i + 1 == args.fault_after and \
                not (out / "fault.done").exists():
            (out / "fault.done").touch()
            if args.fault == "agent":
                os.kill(os.getppid(), signal.SIGKILL)
            else:
                os.kill(os.getpid(), signal.SIGKILL if args.fault == "kill" else signal.SIGSTOP)
        if args.idle_after_fault and (out / "fault.done").exists():
            time.sleep(args.idle_after_fault)
    loader.close()
    shutdown_rpc()
    result = {"rank": ctx.rank, "restart": restart, "seeds": ids.tolist(), "batches": batches}
    (out / f"inc{restart}_rank{ctx.rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
