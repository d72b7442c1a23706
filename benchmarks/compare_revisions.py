"""One benchmark, two source trees, interleaved runs in one sitting.

Runs the same benchmark command line in two trees of pyg_dist (``--base``, e.g. an older
commit unpacked by ``git archive COMMIT | tar -x -C DIR``, and ``--head``, by default this
one), alternating which goes first in each pair (base-head, head-base, ...), every run
under ``nice -n NICE`` with ``PYTHONPATH`` set to its own tree, so each run imports that
tree's ``pyg_dist`` and runs that tree's copy of the script. From each run's last JSON
line it reads the ``--keys`` (numbers, higher is better, e.g. seeds/s) and reports the
head/base ratio of every pair, with the load average before and after each run (on a
shared machine figures are read as ratios of neighbouring runs, not as absolutes).

Prints one line per run, then ONE JSON line, appended to
``benchmarks/results/compare_revisions.jsonl`` (``--no-save``: print only).

Example:
    git archive 1303fcb | tar -x -C /tmp/base1303
    python benchmarks/compare_revisions.py --base /tmp/base1303 --pairs 3 \\
        --keys dist_1p_seeds_per_s,dist_2p_seeds_per_s -- \\
        benchmarks/sampling.py --setting dist --ids-nodes 0 --fetch-ids 0
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sampling as bench  # noqa: E402  (machine_info, report)

HEAD = Path(__file__).resolve().parent.parent


def last_json(text: str) -> Dict[str, object]:
    """The last line of ``text`` that parses as a JSON object.

    Raises:
        ValueError: if no line does.
    """
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise ValueError("the benchmark printed no JSON line")


def run_once(tree: Path, command: List[str], nice: int, timeout: float) -> Dict[str, object]:
    """Runs ``python TREE/command[0] command[1:]`` in ``tree`` with ``PYTHONPATH=tree``.

    Returns:
        Its last JSON line, with the wall seconds and the load average before and after.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    argv = ["nice", "-n", str(nice), sys.executable, str(tree / command[0]), *command[1:]]
    load_before, start = [round(v, 2) for v in os.getloadavg()], time.perf_counter()
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise RuntimeError(f"{tree}: exit code {done.returncode}:\n{tail}")
    return {"line": last_json(done.stdout), "wall_s": round(time.perf_counter() - start, 1),
            "load_before": load_before, "load_after": [round(v, 2) for v in os.getloadavg()]}


def compare(base: Path, head: Path, command: List[str], keys: List[str], pairs: int,
            nice: int, timeout: float) -> Dict[str, object]:
    """``pairs`` interleaved pairs of runs; per key the values and head/base ratios."""
    runs: List[Dict[str, object]] = []
    ratios: Dict[str, List[float]] = {k: [] for k in keys}
    for i in range(pairs):
        order = [("base", base), ("head", head)]
        got = {}
        for name, tree in order if i % 2 == 0 else order[::-1]:
            out = run_once(tree, command, nice, timeout)
            values = {k: out["line"].get(k) for k in keys}
            runs.append({"pair": i, "tree": name, "values": values, "wall_s": out["wall_s"],
                         "load_before": out["load_before"], "load_after": out["load_after"]})
            print(json.dumps(runs[-1]), flush=True)
            got[name] = values
        for k in keys:
            b, h = got["base"][k], got["head"][k]
            if isinstance(b, (int, float)) and isinstance(h, (int, float)) and b > 0:
                ratios[k].append(round(h / b, 3))
    summary = {k: {"ratios": r, "median_ratio": round(statistics.median(r), 3) if r else None,
                   "min_ratio": min(r) if r else None} for k, r in ratios.items()}
    return {"runs": runs, "summary": summary}


def revision(tree: Path) -> str:
    """``tree``'s git commit (with ``+changes`` when its work tree differs), or ``"?"``
    for a tree that is no git checkout (e.g. one unpacked by ``git archive``)."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *cmd], capture_output=True,
                              text=True).stdout.strip()
    if git("rev-parse", "--show-toplevel") != str(tree.resolve()):
        return "?"
    return git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain",
                                                                     "--untracked-files=no")
                                                  else "")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", type=Path, required=True, help="the older tree")
    p.add_argument("--head", type=Path, default=HEAD, help="the newer tree (default: this)")
    p.add_argument("--keys", required=True, help="comma-separated keys of the JSON line")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--nice", type=int, default=5)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--no-save", action="store_true", help="do not append to results/")
    p.add_argument("command", nargs="+",
                   help="after --: the script (relative to each tree) and its arguments")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    for tree in (args.base, args.head):
        if not (tree / args.command[0]).is_file():
            sys.exit(f"compare_revisions: {tree / args.command[0]} does not exist")
    start = bench.machine_info()
    out = compare(args.base.resolve(), args.head.resolve(), args.command,
                  args.keys.split(","), args.pairs, args.nice, args.timeout)
    line = {"benchmark": "compare_revisions", "base": str(args.base), "head": str(args.head),
            "head_revision": revision(args.head),
            "command": " ".join(args.command), "pairs": args.pairs, "nice": args.nice,
            **start, **out, "load_avg_end": bench.machine_info()["load_avg"]}
    bench.report(line, None if args.no_save else "compare_revisions.jsonl")


if __name__ == "__main__":
    main()
