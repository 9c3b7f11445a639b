#!/usr/bin/env bash
# Where a training step's GPU time goes, kernel by kernel: Nsight Compute runs `vlm bench train` for a few steps with
# every kernel serialized and timed alone, and dev/gpu/kernel_profile.py sums the last complete step by category
# (GEMM, attention, norms, ...) and lists the costliest kernels. The sum is the step's work without the overlap of the
# side stream (the op-by-op profile of `vlm bench train` shows the overlapped wall time instead). GEMMs use
# cuBLASLt's heuristic algorithm (--no-gemm-autotune: autotuning's timed candidates would be profiled too).
#
#   dev/gpu/gpu_kernel_profile.sh [extra `vlm bench train` flags]
#
# Environment: VLM_BIN (default .carry/train: vlm and lib/), OUT (default ./gpu_profile_out), CLOCKS (ncu
# --clock-control: none, the default, keeps the boost clocks the benchmark runs at; base locks the base clock, as
# ncu does by default), STEP_TIMEOUT (seconds, default 400).
set -uo pipefail
BIN=${VLM_BIN:-.carry/train}
OUT=${OUT:-gpu_profile_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
[ -x "$BIN/vlm" ] || { echo "gpu_kernel_profile: $BIN/vlm is not an executable (set VLM_BIN)" >&2; exit 2; }
command -v ncu >/dev/null || { echo "gpu_kernel_profile: ncu (Nsight Compute) is not on the PATH" >&2; exit 2; }
timeout -k 5 "${STEP_TIMEOUT:-400}" ncu --csv --clock-control "${CLOCKS:-none}" --metrics gpu__time_duration.sum \
  "$BIN/vlm" bench train --steps 1 --warmup 1 --profile-steps 1 --no-gemm-autotune "$@" \
  >"$OUT/kernels.csv" 2>"$OUT/ncu.log" || { echo "gpu_kernel_profile: ncu failed (exit $?), see $OUT/ncu.log" >&2; tail -5 "$OUT/ncu.log" >&2; exit 1; }
python3 "$(dirname "$0")/kernel_profile.py" "$OUT/kernels.csv" | tee "$OUT/kernel_profile.txt"
