#!/usr/bin/env bash
# Installs what is needed (into .venv, if missing) and runs the test suite.
#
#   bash scripts/test.sh                         # everything, then the PyG 2.6 pass
#   bash scripts/test.sh -m "not multiprocess"   # the inner loop: one process per test
#   bash scripts/test.sh tests/loader -n 0       # any pytest arguments (-n 0: no workers)
#
# With no arguments, two tracks side by side. One compiles pyg_dist's numba kernels
# once into their on-disk cache (a clean clone has none: every fork server and trainer
# would compile them, ~1 min of CPU each), then runs one at a time the tests marked
# `serial` (wall-clock bounds, or real torchrun jobs of 5+ fresh interpreters: mostly
# waiting; their output is printed when they end). The other runs the one-process tests on
# PYG_DIST_TEST_WORKERS pytest-xdist workers (default 2, a whole file per worker:
# --dist loadfile builds a file's module fixtures once), then the `multiprocess` tests,
# also two files at a time (their processes are forked from a warm fork server,
# pyg_dist.testing), then the tests that touch PyG's API again against the oldest
# torch_geometric pyproject.toml allows (2.6), installed beside the venv's. The
# multiprocess passes collect only the files that mention the marker. With arguments:
# pytest on the workers.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Bytecode of pyg_dist, tests and examples is cached (in gitignored __pycache__ folders):
# with PYTHONDONTWRITEBYTECODE set, every fresh interpreter and every pytest worker would
# compile them from source again (~0.5 s per process, ~3 s per test collection).
unset PYTHONDONTWRITEBYTECODE
WORKERS="${PYG_DIST_TEST_WORKERS:-2}"
PARALLEL=(-n "$WORKERS" --dist loadfile)
if ! python -c "import xdist" 2>/dev/null; then
  echo "[test] pytest-xdist is missing from the venv: running the tests one at a time" >&2
  PARALLEL=()
fi
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q "${PARALLEL[@]}" "$@"
fi
# the files that can hold multiprocess tests (a marker is spelled out where it is set)
mapfile -t MP_FILES < <(grep -rlw --include='test_*.py' multiprocess tests | sort)

SERIAL_LOG="$(mktemp "${TMPDIR:-/tmp}/pyg_dist-serial.XXXXXX")"
# the kernels are compiled while the one-process pass collects its tests
(start=$SECONDS && python -c "import pyg_dist.loader._preload" \
  && echo "[test] the kernels were compiled (or loaded) in $((SECONDS - start))s" \
  && exec python -m pytest -q --durations=25 -m "multiprocess and serial" "${MP_FILES[@]}") \
  >"$SERIAL_LOG" 2>&1 &
SERIAL_PID=$!
trap 'kill "$SERIAL_PID" 2>/dev/null || true; rm -f "$SERIAL_LOG"' EXIT
failed=0
python -m pytest -q --durations=10 "${PARALLEL[@]}" -m "not multiprocess" || failed=1

compat_pass() {
  OLDEST_PYG="2.6.1"
  COMPAT=".venv/compat-torch_geometric-$OLDEST_PYG"
  if [ ! -d "$COMPAT/torch_geometric" ]; then
    echo "[test] installing torch_geometric==$OLDEST_PYG into $COMPAT"
    python -m pip install -q --no-compile --no-deps --target "$COMPAT" "torch_geometric==$OLDEST_PYG"
  fi
  # What touches PyG's API (Data/HeteroData, loaders' options, collate, PyG's own classes)
  # in one process, plus one homo, one link and one hetero loader across ranks. The other
  # cases of tests/distributed/test_loader.py (sampler workers, the original-id ground
  # truth over 2 and 3 partitions) check our ids, not PyG's API: the first pass covers them,
  # and tests/loader/test_state.py runs sampler workers here too.
  COMPAT_TESTS=(
    tests/test_versions.py tests/loader tests/sampler/test_features.py
    tests/compat/test_surface.py tests/datasets/test_pyg_classes.py
    "tests/distributed/test_loader.py::test_node_loader_two_ranks_uneven_seeds[0]"
    tests/distributed/test_loader.py::test_link_loader_positives_are_edges_negatives_are_not
    tests/distributed/test_loader.py::test_hetero_node_loader_three_ranks
  )
  echo "[test] again with torch_geometric $OLDEST_PYG: loaders, collate, sampling"
  PYTHONPATH="$PWD/$COMPAT" PYG_DIST_EXPECT_PYG="$OLDEST_PYG" python -m pytest -q \
    "${PARALLEL[@]}" "${COMPAT_TESTS[@]}"
}

python -m pytest -q --durations=40 "${PARALLEL[@]}" -m "multiprocess and not serial" \
  "${MP_FILES[@]}" || failed=1
# while the serial tests finish (the last of them mostly wait on timeouts)
compat_pass || failed=1
wait "$SERIAL_PID" || failed=1
echo "[test] the tests marked serial (they ran beside the others, one at a time):"
cat "$SERIAL_LOG"
[ "$failed" -eq 0 ] || exit 1
