#!/usr/bin/env bash
# The GPU check in one call: PYTHONPATH=. bash scripts/gpu_check.sh OUT
# Runs the cuda tests, the demo (eager, --graph, --graph at 4096x2048), the bench's host section and
# the whole suite under one time budget; writes at most 8 files into OUT and prints the targets'
# PASS/FAIL/NOT RUN summary. See scripts/gpu_check.py (and docs/gpu.md) for the steps and targets.
# A CPU dry run: GPU_CHECK_BACKEND=threads GPU_CHECK_QUICK=1 GPU_CHECK_BIG="--tokens 1024 --hidden 256" ...
set -u
if [ $# -ne 1 ]; then
    echo "usage: PYTHONPATH=. bash scripts/gpu_check.sh OUT_DIR" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || py=python
# the whole script stays under 9 minutes even if the Python driver itself hangs
exec timeout -k 10 530 "$py" "$here/gpu_check.py" "$1"
