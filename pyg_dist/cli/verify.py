"""``pyg-dist-verify DIR``: checks every file of every partition of a partition folder.

Each file's size and digest are compared with what its partition's ``MANIFEST.json``
recorded at write time, and its content with ``META.json``
(:func:`pyg_dist.format._integrity.verify_folder`). Output: one line per problem,
naming the file, then a summary line.

Exit codes: ``0`` every file is as written (or, for folders written before digests,
every file is consistent: a note says the digests could not be checked); ``1`` a
problem was found (a digest mismatch, a missing, truncated or inconsistent file, a
damaged ``META.json``); ``2`` bad usage or ``DIR`` is not a readable partition folder.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from pyg_dist.cli._common import Parser, UsageError, run_main
from pyg_dist.format._integrity import verify_folder
from pyg_dist.format._meta import PartitionFormatError

__all__ = ["main"]

PROG = "pyg-dist-verify"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=(
        "Check that every file of every partition of a pyg_dist partition folder has the "
        "size and content digest recorded when it was written, and that its content "
        "agrees with META.json. Reads every byte once. Exit 0: all good; 1: a problem "
        "was found (one line per problem, naming the file); 2: bad usage or unreadable "
        "folder."))
    p.add_argument("dir", metavar="DIR", help="the partition folder (holding META.json)")
    return p


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = verify_folder(args.dir)
    except (OSError, PartitionFormatError) as exc:
        raise UsageError(str(exc)) from exc
    for line in report.problems:
        print(line, flush=True)
    if report.unrecorded:
        print(f"{PROG}: note: {args.dir}: partition(s) {report.unrecorded} were written "
              f"before pyg_dist recorded digests: their content was checked, their bytes "
              f"could not be (re-partition to record digests)", file=sys.stderr)
    if report.problems:
        print(f"{PROG}: {args.dir}: {len(report.problems)} problem(s) found", file=sys.stderr)
        return 1
    checked = (f"{report.files} file(s) match their recorded digests" if report.files
               else "content consistent; no digests recorded")
    print(f"{args.dir}: OK ({checked})")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Runs ``pyg-dist-verify`` on ``argv`` (default: ``sys.argv[1:]``); returns the exit code
    (2 with one line naming the problem on bad input)."""
    return run_main(run, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())
