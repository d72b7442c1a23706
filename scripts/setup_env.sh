#!/usr/bin/env bash
# Creates .venv with pyg_dist and its test dependencies (the `test` extra: pytest,
# pytest-timeout, pytest-xdist for scripts/test.sh's parallel workers, ...) when it is
# missing or stale (the stamp holds pyproject.toml's hash, so a new test dependency
# reinstalls).
# Sourced by scripts/test.sh and scripts/demo.sh. torch is pinned to the version we test
# (2.13.0): an unpinned `torch` would pull the newest, multi-GB CUDA build. On most Linux
# hosts even torch==2.13.0 resolves to the CUDA build; PYG_DIST_TORCH_INDEX (e.g.
# https://download.pytorch.org/whl/cpu) picks the index torch comes from.
set -euo pipefail
TORCH_VERSION="${PYG_DIST_TORCH_VERSION:-2.13.0}"
PYTHON="${PYTHON:-python3}"
VENV=".venv"
STAMP="$VENV/.pyg_dist-stamp"
want="torch=$TORCH_VERSION $(cat pyproject.toml | sha1sum | cut -c1-16)"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  echo "[setup] installing torch==$TORCH_VERSION and pyg_dist[test] into $VENV (a minute or two)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # --no-compile: pip would compile every module of every package (most of a clean
  # install's 100 s, on one core); the modules pyg_dist imports are compiled just below,
  # the others when first imported
  "$VENV/bin/python" -m pip install -q --no-compile "torch==$TORCH_VERSION" \
    ${PYG_DIST_TORCH_INDEX:+--index-url "$PYG_DIST_TORCH_INDEX"}
  # pip works on one core: torch's modules compile on the other meanwhile (a failure
  # there, e.g. a package half installed, only leaves them to compile when first used)
  env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" -c "import torch, torch.distributed.run" \
    >/dev/null 2>&1 &
  warm=$!
  "$VENV/bin/python" -m pip install -q --no-compile -e ".[test]"
  wait "$warm" || true
  env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" -c \
    "import torch_geometric, pyg_dist.loader, pyg_dist.cli.partition"
  echo "$want" > "$STAMP"
fi
export PATH="$PWD/$VENV/bin:$PATH"
