"""``pyg-dist-export``: every node's output of a checkpointed model, written by original id.

Run it like training, one process per rank (any number of ranks, not necessarily as
many as trained the model)::

    torchrun --nproc-per-node=2 -m pyg_dist.cli.export --partition-dir parts \\
        --checkpoint-dir ckpt --model sage --hidden 256 --layers 3 --out-channels 47 \\
        --out preds

Builds the ``BasicGNN`` the flags describe, loads its weights from the
:mod:`pyg_dist.checkpoint` folder, runs exact layer-wise inference (or sampled
inference with ``--num-neighbors``) over every node and exports the result
(:func:`pyg_dist.inference._export`: ``DIR/manifest.json`` and one ``.npy`` pair per
partition, ``--format parquet`` adds a parquet file beside each). Prints one JSON line.
Exit code 2 with a one-line message on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import List, Optional

import torch
import torch.distributed as dist
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from pyg_dist import checkpoint
from pyg_dist.checkpoint import CheckpointError
from pyg_dist.cli._common import Parser, UsageError, run_main
from pyg_dist.format import _partition_io as io
from pyg_dist.format._meta import PartitionFormatError
from pyg_dist.inference import export, infer
from pyg_dist.rpc import DistContext, shutdown_rpc
from pyg_dist.store import LocalFeatureStore, LocalGraphStore

__all__ = ["main"]

PROG = "pyg-dist-export"
MODELS = {"sage": GraphSAGE, "gcn": GCN, "gat": GAT, "gin": GIN}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=(
        "Load a model checkpointed with pyg_dist.checkpoint, compute every node's output "
        "(exact layer-wise, or sampled with --num-neighbors) on the partitioned graph, and "
        "export it by original node id. Run under torchrun, one process per rank."))
    p.add_argument("--partition-dir", required=True, help="the partition folder")
    p.add_argument("--checkpoint-dir", required=True, help="the pyg_dist.checkpoint folder")
    p.add_argument("--out", required=True, help="the export folder to create")
    g = p.add_argument_group("model (a PyG BasicGNN, as trained)")
    g.add_argument("--model", required=True, choices=sorted(MODELS))
    g.add_argument("--hidden", type=int, required=True, help="hidden channels")
    g.add_argument("--layers", type=int, required=True, help="message-passing layers")
    g.add_argument("--out-channels", type=int, default=None, help="output width "
                   "(default: --hidden)")
    g.add_argument("--heads", type=int, default=1, help="attention heads (gat)")
    p.add_argument("--num-neighbors", type=int, nargs="+", default=None,
                   help="sampled inference with these fan-outs (default: exact layer-wise)")
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--format", choices=("npy", "parquet"), default="npy")
    p.add_argument("--scratch-dir", default=None, help="keep hidden states in mapped files "
                   "here (hidden states larger than memory)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export")
    p.add_argument("--progress", action="store_true", help="report every layer's batches")
    return p


def build_model(args: argparse.Namespace, in_channels: int) -> torch.nn.Module:
    """The ``BasicGNN`` the flags describe."""
    for name in ("hidden", "layers", "heads", "batch_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be a positive integer")
    if args.out_channels is not None and args.out_channels < 1:
        raise UsageError("--out-channels must be a positive integer")
    kwargs = {"heads": args.heads} if args.model == "gat" else {}
    return MODELS[args.model](in_channels, args.hidden, args.layers,
                              out_channels=args.out_channels, **kwargs)


def check_paths(args: argparse.Namespace, num_parts: int, world_size: int) -> None:
    """The folders, fan-outs and process count, checked before anything is loaded.

    Raises:
        UsageError: naming the flag and the problem.
    """
    if not Path(args.checkpoint_dir).is_dir():
        raise UsageError(f"--checkpoint-dir {args.checkpoint_dir} is not a folder")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not args.overwrite)):
        raise UsageError(f"--out {out} exists and is not empty" if out.is_dir() else
                         f"--out {out} exists and is not a folder")
    if args.scratch_dir is not None and Path(args.scratch_dir).exists() and \
            not Path(args.scratch_dir).is_dir():
        raise UsageError(f"--scratch-dir {args.scratch_dir} is not a folder")
    bad = [n for n in args.num_neighbors or () if n < -1]
    if bad:
        raise UsageError(f"--num-neighbors must be -1 (all neighbours) or >= 0 per hop, got "
                         f"{bad[0]}")
    if world_size % num_parts:
        raise UsageError(f"{args.partition_dir} holds {num_parts} partitions: run a multiple of "
                         f"{num_parts} processes (torchrun --nproc-per-node), not {world_size}")


def load_weights(args: argparse.Namespace, model: torch.nn.Module) -> checkpoint.CheckpointInfo:
    """Loads the checkpoint's weights into ``model`` (collective).

    Raises:
        UsageError: no checkpoint, or one whose weights do not fit the model the flags
            describe.
    """
    try:
        found = checkpoint.load(args.checkpoint_dir, state={"model": model})
    except CheckpointError as exc:  # damaged, or weights of another model
        raise UsageError(f"cannot load the checkpoint in {args.checkpoint_dir} into the model "
                         f"the flags describe (--model {args.model} --hidden {args.hidden} "
                         f"--layers {args.layers}): {exc}") from None
    if found is None:
        raise UsageError(f"--checkpoint-dir {args.checkpoint_dir} holds no checkpoint")
    return found


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        meta = io.read_meta(args.partition_dir)
    except (OSError, PartitionFormatError) as exc:
        raise UsageError(str(exc)) from exc
    if meta.is_hetero:
        raise UsageError(f"{args.partition_dir} holds a heterogeneous graph: --model builds "
                         f"homogeneous models; use pyg_dist.infer and pyg_dist.inference."
                         f"export on a to_hetero model from Python")
    spec = meta.node_attrs.get(meta.node_types[0], {}).get("x")
    if spec is None or len(spec.shape) != 1:
        raise UsageError(f"{args.partition_dir} has no 2-D node feature 'x'")
    ctx = DistContext.from_env()
    check_paths(args, meta.num_parts, ctx.world_size)
    model = build_model(args, int(spec.shape[0]))
    if ctx.world_size > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    found = load_weights(args, model)
    pid = ctx.partition_id(meta.num_parts)
    data = (LocalFeatureStore.from_partition(args.partition_dir, pid),
            LocalGraphStore.from_partition(args.partition_dir, pid))
    start = time.perf_counter()
    options = {"scratch_dir": args.scratch_dir} if args.num_neighbors is None else {}
    result = infer(model, data, num_neighbors=args.num_neighbors, batch_size=args.batch_size,
                   progress=args.progress or None, ctx=ctx, **options)
    seconds = time.perf_counter() - start
    try:
        out = export(result, args.partition_dir, args.out, overwrite=args.overwrite,
                     format=args.format, ctx=ctx)
    except FileExistsError as exc:  # another job created --out meanwhile
        raise UsageError(str(exc)) from None
    del result  # rows freed before leaving RPC
    shutdown_rpc()
    if ctx.rank == 0:
        print(json.dumps({"export": str(out), "step": found.step, "num_nodes":
                          meta.num_nodes[meta.node_types[0]], "ranks": ctx.world_size,
                          "mode": "layerwise" if args.num_neighbors is None else "sampled",
                          "infer_s": round(seconds, 3)}), flush=True)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Runs ``pyg-dist-export`` on ``argv`` (default: ``sys.argv[1:]``); returns the exit code
    (2 with one line naming the problem on bad input)."""
    return run_main(run, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())
