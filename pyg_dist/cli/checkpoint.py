"""``pyg-dist-checkpoint``: list, verify and choose the versions of a checkpoint folder.

::

    pyg-dist-checkpoint list DIR             # every version: step, ranks, complete or why not
    pyg-dist-checkpoint verify DIR [VERSION] # every file against its digest (default: LATEST's)
    pyg-dist-checkpoint use DIR VERSION      # verify VERSION, then point LATEST at it

For a checkpoint folder damaged outside the job (a version removed by hand, a disk that
lost files): ``checkpoint.load`` refuses a ``LATEST`` naming a missing or incomplete
version; ``use`` makes a complete, intact version current again (``LATEST`` is replaced
atomically, only after the version verified), after which the job resumes from it.

Exit codes: ``0`` done (``verify``: every file matches); ``1`` a version is damaged
(``verify``/``use``: the problem, naming the file, in one line; ``LATEST`` unchanged);
``2`` bad usage: not a checkpoint folder, not a version of it (one line).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional

from pyg_dist.checkpoint import CheckpointError, _versions as versions
from pyg_dist.cli._common import Parser, UsageError, run_main
from pyg_dist.format import _files as fs

__all__ = ["main"]

PROG = "pyg-dist-checkpoint"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=(
        "List, verify and choose the versions of a pyg_dist checkpoint folder. Exit 0: "
        "done; 1: a version is damaged (LATEST unchanged); 2: bad usage."))
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    ls = sub.add_parser("list", help="every version: step, ranks, complete or why not")
    ls.add_argument("dir", metavar="DIR", help="the checkpoint folder")
    verify = sub.add_parser("verify", help="check every file of a version against its digest")
    verify.add_argument("dir", metavar="DIR", help="the checkpoint folder")
    verify.add_argument("version", metavar="VERSION", nargs="?", default=None,
                        help="a version folder name (default: the one LATEST names)")
    use = sub.add_parser("use", help="verify VERSION, then make it current (LATEST)")
    use.add_argument("dir", metavar="DIR", help="the checkpoint folder")
    use.add_argument("version", metavar="VERSION", help="a version folder name, as listed")
    return p


def _folder(text: str) -> Path:
    root = Path(text)
    if not root.is_dir():
        raise UsageError(f"{text}: not a folder")
    return root


def _version(root: Path, name: Optional[str]) -> str:
    """``name``, checked to be a version folder of ``root``, or the one LATEST names."""
    if name is None:
        try:
            current = versions.current(root)
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
        if current is None:
            raise UsageError(f"{root}: no {fs.LATEST}: name the version to verify "
                             f"(see: {PROG} list {root})")
        return current
    if not fs.VERSION_NAME.fullmatch(name):
        raise UsageError(f"{name!r} is not a version name (step<digits>-<8 hex>; see: "
                         f"{PROG} list {root})")
    if not (root / name).is_dir():
        raise UsageError(f"{root}: no version {name} (see: {PROG} list {root})")
    return name


def list_versions(root: Path) -> int:
    named = fs.pointer_name(root)
    listed = versions.list_versions(root)
    for name, info, why in reversed(listed):
        mark = "*" if name == named else " "
        if info is None:
            print(f"{mark} {name}  incomplete: {why}")
        else:
            print(f"{mark} {name}  step {info.step}  saved by {info.world_size} rank(s)  "
                  f"{len(info.digests) + 1} files")
    if not listed:
        print(f"{root}: no versions")
    if named is not None and named not in {name for name, _, _ in listed}:
        print(f"{fs.LATEST} names {named[:80]!r}, which is not in {root}")
    elif named is None:
        print(f"no {fs.LATEST}: a job starts from scratch")
    return 0


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    root = _folder(args.dir)
    try:
        if args.command == "list":
            return list_versions(root)
        name = _version(root, args.version)
        if args.command == "verify":
            info = versions.verify_version(root, name)
            print(f"{root / name}: OK (step {info.step}, {len(info.digests)} files match "
                  f"their digests)")
            return 0
        info = versions.use(root, name)
        print(f"{root / fs.LATEST} now names {name} (step {info.step}, verified)")
        return 0
    except CheckpointError as exc:
        print(f"{PROG}: {' '.join(str(exc).split())}")
        return 1


def main(argv: Optional[List[str]] = None) -> int:
    """Runs ``pyg-dist-checkpoint`` on ``argv`` (default: ``sys.argv[1:]``); returns the exit code
    (2 with one line naming the problem on bad input)."""
    return run_main(run, PROG, argv)


if __name__ == "__main__":
    raise SystemExit(main())
