#!/usr/bin/env bash
# The main job: partition a synthetic graph into 2 parts (and, once the loaders land,
# train on it with 2 processes). Sets up .venv first when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
OUT="${DEMO_DIR:-.demo}"
python scripts/partition_graph.py --dataset synthetic --num-nodes 50000 --avg-degree 10 \
  --feat-dim 32 --num-classes 5 --num-parts 2 --out "$OUT/parts" --overwrite
