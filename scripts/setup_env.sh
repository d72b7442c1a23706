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
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" \
    ${PYG_DIST_TORCH_INDEX:+--index-url "$PYG_DIST_TORCH_INDEX"}
  "$VENV/bin/python" -m pip install -q -e ".[test]"
  echo "$want" > "$STAMP"
fi
export PATH="$PWD/$VENV/bin:$PATH"
