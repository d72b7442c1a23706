"""Soak of checkpoint recovery: random SIGKILLs of a 2-rank training job under
``torchrun --max-restarts``; every job must finish with exit code 0 and the same final
weights as an uninterrupted run.

The job is ``benchmarks/trainers/node_classification.py`` on Cora split in two (full fan-out, so
each batch has one right answer; a checkpoint every ``--checkpoint-every`` batches, the
last one at the final step). Each job gets 1 to ``--max-kills-per-job`` SIGKILLs, each at a random
moment of an incarnation's training (uniform over how long the uninterrupted run trains,
from its "checkpoint:" line to its end), each
of a random target: rank 0, rank 1 (torchrun restarts the job: ``--max-restarts`` is the
job's number of kills) or the torchrun agent (its trainers are orphaned and exit on their
own; the soak then starts the same ``torchrun`` command again, as a user or a scheduler
would). After each job: exit code 0, the final checkpoint's model weights equal to the
reference run's (loaded on one process through ``checkpoint.load``), and the checkpoint
folder holds only ``LATEST`` and at most ``keep`` (2) complete versions: no leftovers.

Ends with ONE JSON line: kills made (by target), jobs, failures, restarts each job
needed (incarnations - 1, from the example's "checkpoint:" line of each incarnation).

    python benchmarks/checkpoint_soak.py --kills 200 --time-limit 3600
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository: tests.support
EXAMPLE = REPO / "benchmarks" / "trainers" / "node_classification.py"
KEEP = 2  # the example's checkpoint.save default


def partition(cora_root: Path, out: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "partition_graph.py"), "--dataset", "Cora",
           "--root", str(cora_root), "--num-parts", "2", "--out", str(out), "--quiet"]
    subprocess.run(cmd, check=True, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL)


def _env() -> Dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def job_cmd(args: argparse.Namespace, parts: Path, ckpt: Path, restarts: int) -> List[str]:
    port = random.randint(20000, 60000)
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
            f"--max-restarts={restarts}", "--master-addr=127.0.0.1", f"--master-port={port}",
            str(EXAMPLE), "--partition-dir", str(parts), "--epochs", str(args.epochs),
            "--batch-size", "16", "--num-neighbors=-1,-1", "--hidden", "16",
            "--skip-eval", "--log-every", "0", "--rpc-timeout", "10", "--seed", "0",
            "--checkpoint-dir", str(ckpt), "--checkpoint-every", str(args.checkpoint_every)]


def trainers(agent: int) -> List[psutil.Process]:
    """The agent's live trainer processes (its direct children), by rank order of start."""
    try:
        kids = psutil.Process(agent).children()
    except psutil.NoSuchProcess:
        return []
    return sorted((k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE),
                  key=lambda k: k.create_time())


def rank_of(proc: psutil.Process) -> Optional[int]:
    try:
        value = proc.environ().get("RANK")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return int(value) if value is not None else None


class Job:
    """One job (one or more torchrun commands) under random kills."""

    def __init__(self, args: argparse.Namespace, parts: Path, work: Path, kills: int) -> None:
        self.args, self.parts, self.work, self.planned = args, parts, work, kills
        self.ckpt, self.log = work / "ckpt", open(work / "output.log", "ab")
        self.kills: List[str] = []
        self.proc: Optional[subprocess.Popen] = None

    def launch(self) -> None:
        cmd = job_cmd(self.args, self.parts, self.ckpt, self.planned)
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def incarnations(self) -> int:
        """Incarnations that reached training (the example's "checkpoint:" line each)."""
        out = self.output()
        return out.count("checkpoint: resumed") + out.count("checkpoint: none in")

    def kill_once(self, window: float, deadline: float) -> bool:
        """Waits for the next incarnation to start training, then SIGKILLs a random target
        at a random moment of its training; False when the job ended first."""
        seen = len(self.kills)
        while self.incarnations() <= seen:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        time.sleep(random.uniform(0.0, window))
        found = [p for p in trainers(self.proc.pid)]
        if self.proc.poll() is not None or len(found) != 2:
            return False
        target = random.choice(["rank0", "rank1", "agent"])
        if target == "agent":
            orphans = found
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            psutil.wait_procs(orphans, timeout=self.args.orphan_timeout)
            for p in orphans:  # still there: gone with the machine
                if p.is_running():
                    p.kill()
            self.kills.append(target)
            self.launch()
        else:
            victim = next((p for p in found if rank_of(p) == int(target[-1])), None)
            if victim is None:
                return False
            victim.kill()
            self.kills.append(target)
        return True

    def finish(self, deadline: float) -> int:
        try:
            return self.proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for p in [psutil.Process(self.proc.pid), *trainers(self.proc.pid)]:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            self.proc.wait()
            return -9

    def output(self) -> str:
        self.log.flush()
        return (self.work / "output.log").read_text(errors="replace")


def final_weights(parts: Path, ckpt: Path) -> Dict[str, Any]:
    """The model weights of ``ckpt``'s current version, loaded on one process."""
    from torch_geometric.nn import GraphSAGE
    from pyg_dist import LocalFeatureStore, LocalGraphStore, checkpoint
    node_type = LocalGraphStore.from_partition(parts, 0).meta.node_types[0]
    features = LocalFeatureStore.from_partition(parts, 0).get_tensor_size(node_type, "x")[1]
    model = GraphSAGE(features, 16, num_layers=2, out_channels=7)  # Cora's 7 classes
    info = checkpoint.load(ckpt, state={"model": model}, restore_rng=False)
    if info is None:
        raise RuntimeError(f"{ckpt}: no checkpoint")
    return {k: v.clone() for k, v in model.state_dict().items()}


def leftovers(ckpt: Path) -> List[str]:
    """What the checkpoint folder holds beyond LATEST and up to KEEP complete versions."""
    from pyg_dist.checkpoint import _versions as versions
    names = sorted(p.name for p in ckpt.iterdir())
    listed = versions.list_versions(ckpt)
    bad = [n for n in names if n != "LATEST" and n not in {v for v, _, _ in listed}]
    bad += [f"{v} (incomplete: {why})" for v, info, why in listed if info is None]
    if len(listed) > KEEP:
        bad.append(f"{len(listed)} versions (keep={KEEP})")
    return bad


def same(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    import torch
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def run_trial(args: argparse.Namespace, parts: Path, work: Path, reference: Dict[str, Any],
              window: float) -> Dict[str, Any]:
    work.mkdir(parents=True)
    planned = random.randint(1, args.max_kills_per_job)
    if args.launcher == "forked":
        code, output, kills, _ = run_forked(args, parts, work, planned, window)
    else:
        job = Job(args, parts, work, planned)
        deadline = time.monotonic() + args.job_timeout
        job.launch()
        for _ in range(job.planned):
            if not job.kill_once(window, deadline):
                break
        code, output, kills = job.finish(deadline), job.output(), job.kills
    if args.launcher == "forked":  # a kill may land before the example's first line
        restarts = output.count("[run_script] restarting every rank")
    else:
        restarts = output.count("checkpoint: resumed") + output.count("checkpoint: none in") - 1
    result = {"kills": kills, "exit": code, "restarts": max(restarts, 0)}
    problems = []
    if code != 0:
        problems.append(f"exit code {code}")
    else:
        try:
            if not same(final_weights(parts, work / "ckpt"), reference):
                problems.append("final weights differ from the uninterrupted run")
            problems += [f"leftover {x}" for x in leftovers(work / "ckpt")]
        except Exception as exc:  # report it as this job's failure
            problems.append(f"{type(exc).__name__}: {exc}")
    result["problems"] = problems
    if problems:
        result["output_tail"] = output[-3000:]
    return result


def forked_ranks(seen: set) -> List[psutil.Process]:
    """The live ranks forked by this process's fork server that are not in ``seen``
    (one job runs at a time; the example starts no other process)."""
    found = []
    for server in psutil.Process().children():
        try:
            if "forkserver" not in " ".join(server.cmdline()):
                continue
            found += [k for k in server.children() if k.pid not in seen
                      and k.status() != psutil.STATUS_ZOMBIE]
        except psutil.NoSuchProcess:
            pass
    return found


def run_forked(args: argparse.Namespace, parts: Path, work: Path, kills: int,
               window: float) -> Tuple[int, str, List[str], float]:
    """One job with ranks forked as torchrun runs them (:func:`run_script`, restarts
    included), ``kills`` SIGKILLs of random ranks at random moments of an incarnation;
    returns the exit code, the output, the kills made and how long the ranks lived."""
    from tests.support.scripts import run_script
    done, made, seen = {}, [], set()
    argv = job_cmd(args, parts, work / "ckpt", kills)[7:]

    def launch() -> None:
        done["run"] = run_script(argv[0], argv[1:], 2, timeout=args.job_timeout,
                                 max_restarts=kills)
    thread = threading.Thread(target=launch, daemon=True)
    thread.start()
    while thread.is_alive() and not forked_ranks(set()):
        time.sleep(0.05)
    began = time.monotonic()
    for _ in range(kills):
        ranks: List[psutil.Process] = []
        while thread.is_alive() and len(ranks) < 2:
            ranks = forked_ranks(seen)
            time.sleep(0.05)
        seen.update(r.pid for r in ranks)
        time.sleep(random.uniform(0.0, window))
        ranks = [r for r in ranks if r.is_running() and r.status() != psutil.STATUS_ZOMBIE]
        if not thread.is_alive() or len(ranks) != 2:
            break
        index = random.randrange(2)  # the first started is rank 0
        made.append(f"rank{index}")
        sorted(ranks, key=lambda r: r.pid)[index].kill()
    thread.join()
    return done["run"].returncode, done["run"].output, made, time.monotonic() - began


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=200)
    p.add_argument("--time-limit", type=float, default=None, help="seconds: start no job after")
    p.add_argument("--max-kills-per-job", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--checkpoint-every", type=int, default=2)
    p.add_argument("--cora-root", default=str(REPO / "tests" / "data" / "planetoid"))
    p.add_argument("--job-timeout", type=float, default=600)
    p.add_argument("--orphan-timeout", type=float, default=90)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--launcher", choices=["torchrun", "forked"], default="torchrun",
                   help="forked: ranks forked from a warm server as torchrun runs them "
                        "(tests.support.scripts; restarts in seconds, no agent to kill)")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--failures", default=None, help="append failed jobs' details here (JSON lines)")
    args = p.parse_args()
    random.seed(args.seed)
    began = time.monotonic()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="pyg_dist_soak_"))
    parts = work / "parts"
    if not (parts / "META.json").exists():
        partition(Path(args.cora_root), parts)
    started = time.monotonic()
    (work / "reference").mkdir()
    ref = Job(args, parts, work / "reference", 0)
    if args.launcher == "forked":  # kills land anywhere in a rank's life: it starts fast
        code, output, _, window = run_forked(args, parts, work / "reference", 0, 0.0)
    else:
        ref.launch()
        while ref.incarnations() < 1 and ref.proc.poll() is None:
            time.sleep(0.05)
        ref_start = time.monotonic()
        code, output = ref.finish(started + args.job_timeout), ref.output()
        window = time.monotonic() - ref_start
    if code != 0:
        sys.stderr.write(output[-6000:])
        raise SystemExit("checkpoint_soak.py: the uninterrupted run failed")
    reference = final_weights(parts, ref.ckpt)
    print(f"reference run: {time.monotonic() - started:.1f}s, training window {window:.1f}s",
          flush=True)
    trials, kills = [], Counter()
    while sum(kills.values()) < args.kills:
        if args.time_limit and time.monotonic() - began > args.time_limit:
            break
        trial = run_trial(args, parts, work / f"job{len(trials):04d}", reference, window)
        trials.append(trial)
        kills.update(trial["kills"])
        print(f"job {len(trials)}: kills {trial['kills']} restarts {trial['restarts']} exit "
              f"{trial['exit']} {'OK' if not trial['problems'] else trial['problems']}",
              flush=True)
        if trial["problems"] and args.failures:
            with open(args.failures, "a") as f:
                f.write(json.dumps(trial) + "\n")
    restarts = Counter(t["restarts"] for t in trials if t["kills"])
    failed = [t for t in trials if t["problems"]]
    print(json.dumps({
        "kills": sum(kills.values()), "kills_by_target": dict(sorted(kills.items())),
        "jobs": len(trials), "jobs_killed": sum(1 for t in trials if t["kills"]),
        "jobs_failed": len(failed), "lost": len(failed),
        "failures": sorted({pr for t in failed for pr in t["problems"]})[:10],
        "restarts_per_job": dict(sorted(restarts.items())),
        "restarts_total": sum(t["restarts"] for t in trials),
        "launcher": args.launcher, "epochs": args.epochs, "checkpoint_every": args.checkpoint_every,
        "training_window_s": round(window, 2),
        "elapsed_s": round(time.monotonic() - began, 1)}), flush=True)


if __name__ == "__main__":
    main()
