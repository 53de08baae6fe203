#!/usr/bin/env bash
# The GPU check in one call: bash scripts/gpu_check.sh OUT
# Runs python -m demos.gpu_check OUT (the cuda tests, the demo: eager, --graph, --graph at 4096x2048, the
# bench's host section and the whole suite under one time budget; at most 8 files into OUT, and the
# targets' PASS/FAIL/NOT RUN summary) under an outer timeout. See demos/gpu_check.py (and docs/gpu.md).
# A CPU dry run: GPU_CHECK_BACKEND=threads GPU_CHECK_QUICK=1 GPU_CHECK_BIG="--tokens 1024 --hidden 256" ...
set -u
if [ $# -ne 1 ]; then
    echo "usage: bash scripts/gpu_check.sh OUT_DIR" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONPATH="$(dirname "$here")${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || py=python
# the whole check stays under 9 minutes even if the Python driver itself hangs
exec timeout -k 10 530 "$py" -m demos.gpu_check "$1"
