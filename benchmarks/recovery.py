"""Time lost to a killed rank: ``torchrun --max-restarts=1``, 2 ranks, a synthetic graph,
``benchmarks/trainers/node_classification.py`` (or the embedding trainer: a checkpoint holding a
``DistEmbedding`` row and ``SparseAdam`` state per node) with ``--checkpoint-dir``; rank 1
SIGKILLs itself in the middle of its one epoch (``--kill-at`` of
:mod:`tests.support.instrument`, which runs the unmodified example and reports the
checkpoint figures).

Reports, as ONE JSON line: checkpoint size, save and load time (and bandwidth), the time
from the kill to the first batch trained after the restart (restart + process start +
RPC formed again + checkpoint loaded), its parts as seen in the job's output, and the
batches redone (trained after the last checkpoint, lost, trained again) as a fraction of
an epoch.

    python benchmarks/recovery.py --num-nodes 500000 --checkpoint-every 20 --kill-at 50
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository: tests.support
EXAMPLES = {"node": "node_classification.py", "embedding": "embedding_node_classification.py"}
INSTRUMENT = REPO / "tests" / "support" / "instrument.py"


def partition(args: argparse.Namespace, out: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "partition_graph.py"), "--dataset",
           "synthetic", "--num-nodes", str(args.num_nodes), "--avg-degree",
           str(args.avg_degree), "--feat-dim", str(args.feat_dim), "--num-parts", "2",
           "--out", str(out), "--quiet", "--root", str(out.parent)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's pyg_dist, as the job's
    subprocess.run(cmd, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL)


def run_job(args: argparse.Namespace, parts: Path,
            work: Path) -> Tuple[int, List[Tuple[float, str]]]:
    """Runs the job; returns its exit code and its output lines with arrival times."""
    port = 29000 + os.getpid() % 2000
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
           "--max-restarts=1", "--master-addr=127.0.0.1", f"--master-port={port}",
           str(INSTRUMENT), "--kill-at", f"1:{args.kill_at}", "--seed-log", str(work), "--",
           str(REPO / "benchmarks" / "trainers" / EXAMPLES[args.example]), "--partition-dir", str(parts),
           "--epochs", "1", "--batch-size", str(args.batch_size), "--num-neighbors", "10,5",
           "--hidden", str(args.hidden), "--skip-eval", "--log-every", "0",
           "--checkpoint-dir", str(work / "ckpt"), "--checkpoint-every",
           str(args.checkpoint_every), "--num-workers", str(args.num_workers)]
    if args.example == "embedding":  # a DistEmbedding row per node, SparseAdam state
        cmd += ["--embedding-dim", str(args.embedding_dim)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: List[Tuple[float, str]] = []
    reader = threading.Thread(
        target=lambda: lines.extend((time.time(), ln) for ln in proc.stdout), daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    reader.join(10)
    return code, lines


def seed_log(work: Path) -> Dict[int, List[dict]]:
    return {r: [json.loads(x) for x in (work / f"seeds_rank{r}.jsonl").read_text().splitlines()]
            for r in (0, 1)}


def line_time(lines: List[Tuple[float, str]], text: str) -> float:
    return next((t for t, ln in lines if text in ln), float("nan"))


def measure(args: argparse.Namespace, work: Path) -> Dict:
    parts = work / "parts"
    start = time.perf_counter()
    partition(args, parts)
    partition_s = time.perf_counter() - start
    code, lines = run_job(args, parts, work)
    output = "".join(ln for _, ln in lines)
    if code != 0 or not any(ln.startswith("{") for _, ln in lines):
        sys.stderr.write(output[-8000:])
        raise SystemExit(f"recovery.py: the job failed (exit code {code})")
    result = json.loads([ln for _, ln in lines if ln.startswith("{")][-1])
    from tests.support.instrument import read_reports
    result.update(read_reports(output).get(0, {}))  # checkpoint figures of rank 0
    logs = seed_log(work)
    killed_at = max(e["t"] for e in logs[1] if e["inc"] == 0)
    lost = max(e["step"] for e in logs[1] if e["inc"] == 0)
    first_after = min(e["t"] for r in (0, 1) for e in logs[r] if e["inc"] == 1)
    resumed_line = line_time(lines, "checkpoint: resumed")
    redone = lost - (result["resumed_from"] or 0)
    per_epoch = max(e["step"] for e in logs[0])  # one epoch: its last step
    size_mb = result.get("checkpoint_mb") or float("nan")
    saves = result.get("checkpoint_saves") or 1
    save_s = (result.get("checkpoint_save_s") or float("nan")) / saves
    load_s = result.get("checkpoint_load_s") or float("nan")
    return {
        "example": args.example, "num_nodes": args.num_nodes, "world_size": 2,
        "num_workers": args.num_workers,
        "partition_s": round(partition_s, 2), "batches_per_epoch": per_epoch,
        "checkpoint_every": args.checkpoint_every, "checkpoint_mb": size_mb,
        "checkpoint_save_s": round(save_s, 4), "checkpoint_load_s": load_s,
        "save_mb_per_s": round(size_mb / save_s, 1) if save_s > 0 else None,
        "load_mb_per_s": round(size_mb / load_s, 1) if load_s and load_s > 0 else None,
        "kill_to_first_batch_s": round(first_after - killed_at, 2),
        "kill_to_resumed_log_s": round(resumed_line - killed_at, 2),
        "resumed_log_to_first_batch_s": round(first_after - resumed_line, 2),
        "resumed_from_step": result["resumed_from"], "killed_after_step": lost,
        "redone_batches": redone,
        "redone_epoch_frac": round(redone / max(per_epoch, 1), 4),
        "job_total_s": result["total_s"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=500_000)
    p.add_argument("--avg-degree", type=int, default=10)
    p.add_argument("--feat-dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--checkpoint-every", type=int, default=20,
                   help="batches between checkpoints (0: per epoch)")
    p.add_argument("--kill-at", type=int, default=50, help="batch after which rank 1 is "
                   "killed")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--example", choices=sorted(EXAMPLES), default="node",
                   help="embedding: learnable node embeddings (a large checkpoint)")
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--work-dir", default=None, help="keep files here (default: a temp dir)")
    args = p.parse_args()
    if args.work_dir:
        work = Path(args.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        print(json.dumps(measure(args, work)), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="pyg_dist_recovery_") as tmp:
        print(json.dumps(measure(args, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
