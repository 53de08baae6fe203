#!/usr/bin/env bash
# A GPU session's checks in one device call (docs/gpu.md, "A lent GPU: one call"):
#   bash scripts/gpu_session.sh OUT [BACKEND]
# 1. the GPU check (scripts/gpu_check.sh) without the whole suite, under GPU_CHECK_BUDGET_S (default 260 s);
# 2. python -m demos.calibrate --backend BACKEND --quick (at most CALIBRATE_S, default 110 s);
# 3. python -m demos.validate grid --backend BACKEND --quick --repeats 1 on that profile (the toy's h200 one if
#    the calibration wrote none), at most VALIDATE_S (default 140 s).
# Everything goes to a work folder and comes back as OUT/all.tar.gz, with OUT/summary.txt (the GPU check's
# targets) and OUT/times.txt (each step's exit status and seconds): three files, under a device call's limit
# of eight. About 9 minutes at most. BACKEND defaults to cuda; a CPU dry run:
#   GPU_CHECK_BACKEND=threads GPU_CHECK_QUICK=1 GPU_CHECK_BIG="--tokens 1024 --hidden 128" \
#       GPU_CHECK_BUDGET_S=120 CALIBRATE_S=60 VALIDATE_S=60 bash scripts/gpu_session.sh /tmp/out threads
set -u
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: bash scripts/gpu_session.sh OUT_DIR [cuda|threads]" >&2
    exit 2
fi
out="$1"
backend="${2:-cuda}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || py=python
mkdir -p "$out"
work="$(mktemp -d)"
mkdir -p "$work/check"
start=$(date +%s)
step() { echo "$1 rc=$2 at $(($(date +%s) - start)) s" >> "$work/times.txt"; }
{
    nvidia-smi -L 2>&1
    "$py" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device")' 2>&1
    nproc
} > "$work/env.txt"
GPU_CHECK_BUDGET_S="${GPU_CHECK_BUDGET_S:-260}" GPU_CHECK_SKIP="${GPU_CHECK_SKIP:-suite}" \
    bash "$here/gpu_check.sh" "$work/check" > "$work/gpu_check.out" 2>&1
step gpu_check $?
timeout -k 5 "${CALIBRATE_S:-110}" "$py" -m demos.calibrate --backend "$backend" --quick --no-rerun --no-progress \
    -o "$work/profile.json" > "$work/calibrate.txt" 2>&1
step calibrate $?
profile="$work/profile.json"
[ -s "$profile" ] || profile=h200
echo "validate's profile: $profile" >> "$work/times.txt"
timeout -k 5 "${VALIDATE_S:-140}" "$py" -m demos.validate grid --backend "$backend" --profile "$profile" --quick \
    --repeats 1 --no-rerun --no-progress --json "$work/grid.json" > "$work/validate.txt" 2>&1
step validate $?
cp "$work/check/summary.txt" "$out/summary.txt" 2>/dev/null
cp "$work/times.txt" "$out/times.txt"
tar czf "$out/all.tar.gz" -C "$work" .
rm -rf "$work"
cat "$out/times.txt"
