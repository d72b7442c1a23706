"""A tiny resumable training job for the checkpoint kill walk (run as torchrun runs a
script, not by pytest): DDP linear model with dropout, Adam, a ``DistEmbedding`` with
``SparseAdam`` (sharded rows in every checkpoint), the training loader's position and a
JSON value; ``checkpoint.load`` on start, ``checkpoint.save`` every ``--every`` steps
(``keep=--keep``), ``--steps`` steps in all.

Each incarnation of each rank writes ``OUT/inc<restart>_rank<rank>.json``: the step it
loaded (``null``: none), the version folder, every trained step's seeds, and at the end
the model weights and embedding rows.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pyg_dist import (DistContext, DistEmbedding, DistNeighborLoader, LocalFeatureStore,
                      LocalGraphStore, SparseAdam, checkpoint, init_process_group, node_split,
                      loop, shutdown_rpc)
from pyg_dist.format import _partition_io as io

ROWS = 64  # embedding rows: seeds' original ids modulo ROWS


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--parts", required=True)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--every", type=int, default=2)
    p.add_argument("--keep", type=int, default=1)
    args = p.parse_args()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    ctx = DistContext.from_env(rpc_timeout=20)
    init_process_group("gloo", ctx)
    pid = ctx.partition_id(io.read_meta(Path(args.parts)).num_parts)
    data = (LocalFeatureStore.from_partition(args.parts, pid),
            LocalGraphStore.from_partition(args.parts, pid))
    torch.manual_seed(0)
    model = torch.nn.Linear(data[0].get_tensor_size(data[1].meta.node_types[0], "x")[1], 4)
    # rank-ordered sums: with 3 ranks DDP's all-reduce may differ in the last bit after
    # a restart, and this walk compares weights bit for bit
    ddp = loop.rank_ordered_gradients(torch.nn.parallel.DistributedDataParallel(model))
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    loader = DistNeighborLoader(data=data, num_neighbors=[-1], batch_size=8, shuffle=True,
                                input_nodes=node_split(data, "train", ctx), current_ctx=ctx)
    emb = DistEmbedding(ROWS, 4, name="emb")  # after the loader: it forms pyg_dist's RPC
    sparse = SparseAdam([emb], lr=0.05)
    state = {"model": ddp, "opt": opt, "emb": emb, "sparse": sparse, "train": loader,
             "note": {"step": 0}}
    info = checkpoint.load(args.ckpt, state)
    step = info.step if info is not None else 0
    record = {"loaded": None if info is None else info.step,
              "path": None if info is None else Path(info.path).name, "steps": {}}
    out = Path(args.out) / f"inc{restart}_rank{ctx.rank}.json"
    out.write_text(json.dumps(record))
    while step < args.steps:
        for batch in loader:
            seeds = batch.n_id[:batch.batch_size]
            opt.zero_grad()
            sparse.zero_grad()
            x = F.dropout(batch.x[:batch.batch_size], 0.5)
            loss = (ddp(x) + emb(seeds % ROWS)).pow(2).mean()
            loss.backward()
            opt.step()
            sparse.step()
            step += 1
            record["steps"][step] = seeds.tolist()
            out.write_text(json.dumps(record))
            if step % args.every == 0:
                state["note"] = {"step": step}
                checkpoint.save(args.ckpt, step, state, keep=args.keep)
            if step == args.steps:
                break
    record["weights"] = [t.tolist() for t in model.state_dict().values()]
    record["rows"] = emb.weight[torch.arange(ROWS)].tolist()
    out.write_text(json.dumps(record))
    loader.close()
    shutdown_rpc()
    del ddp, opt  # DDP first: its reducer must not outlive the process group
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
