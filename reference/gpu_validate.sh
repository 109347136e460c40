#!/usr/bin/env bash
# GPU validation on one CUDA device, under 6 minutes on an H200 (reference/gpu_validate.py).
#   reference/gpu_validate.sh [OUT_DIR] [--dry-run]
# OUT_DIR defaults to $OUT (the device runner's folder) or reports/gpu; commit the JSON under
# reports/gpu/. --dry-run runs every case at toy sizes on the CPU (what CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-reports/gpu}}"
shift || true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 360 python -m reference.gpu_validate --out "$out" "$@"
