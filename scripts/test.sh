#!/usr/bin/env bash
# Installs what is needed (into .venv, if missing) and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec python -m pytest -q "$@"
