#!/usr/bin/env bash
# Installs what is needed (into .venv, if missing) and runs the test suite.
# With no arguments it then runs the tests that touch PyG's API again against the
# oldest torch_geometric pyproject.toml allows (2.6), installed beside the venv's.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q "$@"
fi
python -m pytest -q

OLDEST_PYG="2.6.1"
COMPAT=".venv/compat-torch_geometric-$OLDEST_PYG"
if [ ! -d "$COMPAT/torch_geometric" ]; then
  echo "[test] installing torch_geometric==$OLDEST_PYG into $COMPAT"
  python -m pip install -q --no-deps --target "$COMPAT" "torch_geometric==$OLDEST_PYG"
fi
echo "[test] again with torch_geometric $OLDEST_PYG: loaders, collate, sampling"
PYTHONPATH="$PWD/$COMPAT" PYG_DIST_EXPECT_PYG="$OLDEST_PYG" python -m pytest -q \
  tests/test_versions.py tests/loader tests/sampler/test_features.py \
  tests/distributed/test_loader.py tests/compat/test_surface.py tests/datasets/test_pyg_classes.py
