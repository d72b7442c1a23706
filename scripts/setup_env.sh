#!/usr/bin/env bash
# Creates .venv with pyg_dist and its test dependencies when it is missing or stale.
# Sourced by scripts/test.sh and scripts/demo.sh. torch is pinned to the CPU build we
# test (2.13.0): an unpinned `torch` would pull a multi-GB CUDA build.
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
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION"
  "$VENV/bin/python" -m pip install -q -e ".[test]"
  echo "$want" > "$STAMP"
fi
export PATH="$PWD/$VENV/bin:$PATH"
