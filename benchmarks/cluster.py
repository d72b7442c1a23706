"""Runs one command per emulated machine (network namespaces on this host), then tears
the machines down, also after a failure or Ctrl-C.

Machine ``i`` has address ``198.18.0.<i+1>``, its own loopback, and a link to a bridge,
optionally rate-limited in both directions (``--rate 1gbit``, ``tc`` ``tbf``). In the
command, ``{machine}`` is replaced by the machine's index and ``{master}`` by machine
0's address. Needs root (see :mod:`tests.support.netns`).

Example (two machines at 1 Gb/s, one torchrun each):
    python benchmarks/cluster.py --machines 2 --rate 1gbit -- \\
        python -m torch.distributed.run --nnodes=2 --node-rank={machine} \\
        --nproc-per-node=1 --master-addr={master} --master-port=29500 \\
        examples/node_classification.py --partition-dir parts/cora
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support

from tests.support.netns import (EmulatedCluster, exit_on_sigterm,  # noqa: E402
                                 remove_leftovers, unavailable)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--machines", type=int, default=2)
    p.add_argument("--rate", default=None, help="link rate per direction, e.g. 1gbit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to run on every machine after --")
    reason = unavailable()
    if reason is not None:
        print(f"cluster.py: {reason}", file=sys.stderr)
        return 2
    remove_leftovers()
    exit_on_sigterm()
    with EmulatedCluster(args.machines, args.rate) as cluster:
        procs = [cluster.popen(m, [part.format(machine=m, master=cluster.address(0))
                                   for part in command]) for m in range(args.machines)]
        try:
            codes = [proc.wait() for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    print(f"cluster.py: exit codes {codes}", file=sys.stderr)
    return max(abs(c) for c in codes)


if __name__ == "__main__":
    sys.exit(main())
