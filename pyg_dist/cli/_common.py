"""What every pyg_dist command-line tool shares: one-line usage errors, exit code 2."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, List, NoReturn, Optional

from pyg_dist.errors import PygDistError


class UsageError(PygDistError):
    """Bad command-line input: reported in one line with exit code 2."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are :class:`UsageError` (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def run_main(run: Callable[[Optional[List[str]]], int], prog: str,
             argv: Optional[List[str]] = None) -> int:
    """``run(argv)``; a :class:`UsageError` is printed as one line and gives exit code 2."""
    try:
        return run(argv)
    except UsageError as exc:
        message = " ".join(str(exc).split())
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2


def add_synthetic_args(p: argparse.ArgumentParser) -> None:
    """The options of ``--dataset synthetic``."""
    g = p.add_argument_group("synthetic graph")
    g.add_argument("--num-nodes", type=int, default=100_000)
    g.add_argument("--avg-degree", type=float, default=20.0)
    g.add_argument("--feat-dim", type=int, default=100)
    g.add_argument("--num-classes", type=int, default=10)
    g.add_argument("--hetero", action="store_true", help="papers/authors/institutions graph")
