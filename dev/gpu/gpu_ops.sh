#!/usr/bin/env bash
# The GPU-machine script of the CUDA op layer (src/kernels/cuda, except flash/): runs test_kernels_cuda (every op of
# kernels/ops.h on CUDA against the CPU reference, f32 and bf16) and then compute-sanitizer memcheck over it, from the
# repo root, with logs under $OUT. The binary is built on the build machine (the GPU machine has no Debian dev
# packages) and carried there with the shared libraries it needs that the GPU machine may lack; the CUDA libraries
# (cudart, cuBLASLt: far too large to carry) come from the GPU machine's own CUDA 13.
#
#   dev/gpu/gpu_ops.sh pack [BUILD_DIR]   on the build machine: copy BUILD_DIR's test_kernels_cuda (default
#                                         build-hcuda) and its non-system, non-CUDA libraries into $OPS_BIN
#   dev/gpu/gpu_ops.sh [step ...]         on the GPU machine; steps: info tests memcheck racecheck
#                                         (default: info tests memcheck)
#
# Environment: OPS_BIN (default .carry/ops: test_kernels_cuda and lib/; a build dir also works), OUT (default
# /tmp/gpu_ops_out), SAN_FILTER (gtest filter of the sanitizer runs; default all tests but KernelTraceGpu for
# memcheck, the kernels with shared-memory reductions for racecheck), STEP_TIMEOUT (seconds per program, default 420).
# Typical use:
#   cmake -S . -B build-hcuda -DVLM_CUDA=ON -DCMAKE_BUILD_TYPE=Release && \
#     cmake --build build-hcuda -j2 --target test_kernels_cuda && dev/gpu/gpu_ops.sh pack build-hcuda
#   then on the GPU machine (carry .carry/ops):  dev/gpu/gpu_ops.sh
set -uo pipefail
BIN=${OPS_BIN:-.carry/ops}
OUT=${OUT:-/tmp/gpu_ops_out}
STEP_TIMEOUT=${STEP_TIMEOUT:-420}  # seconds per program, so a hung kernel cannot eat the lease
TEST_NAME=test_kernels_cuda

# Libraries every Linux machine has (glibc, the C++ runtime) or that must come from the GPU machine (driver, CUDA).
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|'
SYSTEM_LIBS+='libcuda|libcudart|libcublas|libcublasLt|libnvidia)[.-]'

pack() {
  local build=${1:-build-hcuda} exe
  exe=$(find_test "$build") || { echo "no $TEST_NAME under $build (build the target first)" >&2; return 2; }
  mkdir -p "$BIN/lib"
  cp "$exe" "$BIN/$TEST_NAME"
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $SYSTEM_LIBS ]] && continue
    cp -L "$path" "$BIN/lib/$name"
  done
  # The kernel-trace test dlopens CUPTI (not in ldd's list); the GPU machine may lack it (see dev/gpu/gpu_pack.sh).
  local cupti
  cupti=$(ldconfig -p 2>/dev/null | awk '$1 == "libcupti.so.13" {print $NF; exit}')
  [ -f "$cupti" ] || cupti=/usr/local/cuda/lib64/libcupti.so.13
  if [ -f "$cupti" ]; then cp -L "$cupti" "$BIN/lib/libcupti.so.13"
  else echo "gpu_ops: no libcupti.so.13 here: KernelTraceGpu will fail there unless the GPU machine has one" >&2; fi
  echo "packed $exe into $BIN ($(du -sh "$BIN" | cut -f1) in all; carry it, 64 MiB with the tree at most):"
  du -sh "$BIN/$TEST_NAME" "$BIN"/lib/* | sed 's/^/  /'
}

# The test binary in a packed folder or a build dir.
find_test() {
  local dir=$1
  for f in "$dir/$TEST_NAME" "$dir/tests/kernels/cuda/$TEST_NAME"; do
    [ -x "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

if [ "${1:-}" = pack ]; then
  shift
  pack "$@"
  exit $?
fi

# ---- on the GPU machine ------------------------------------------------------------------------------------------
mkdir -p "$OUT"
EXE=$(find_test "$BIN") || { echo "no $TEST_NAME in $BIN: run 'dev/gpu/gpu_ops.sh pack BUILD_DIR' first" >&2; exit 2; }
BIN=$(cd "$BIN" && pwd)
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
done
# pip's CUDA 13 wheels (nvidia-cublas, nvidia-cuda-runtime) as a last resort.
py_libs=$(python3 - 2>/dev/null <<'PY'
import glob, os, nvidia
dirs = {os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/**/lib*.so.13", recursive=True)}
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH="$BIN/lib${cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}${py_libs:+:$py_libs}"
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run() { timeout -k 5 "$STEP_TIMEOUT" "$@"; }
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
note() { printf '\n==== %s\n' "$*" | tee -a "$OUT/summary.log"; }
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(info tests memcheck)
status=0

for step in "${steps[@]}"; do
  case $step in
    info)
      note "info"
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/summary.log"
      { ldd "$EXE" | grep -E "not found|cublas|cudart"; } | tee -a "$OUT/summary.log"
      ;;
    tests)
      note "tests ($EXE --gtest_brief=1)"
      start=$(date +%s.%N)
      run "$EXE" --gtest_brief=1 --gtest_output="xml:$OUT/tests.xml" >"$OUT/tests.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && status=1
      { echo "exit $rc, $(elapsed "$start") s"
        grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|first bad|guard|Expected|Which is|Value of" \
          "$OUT/tests.log" | head -60; } | tee -a "$OUT/summary.log"
      # On a machine with a GPU, a skipped test means the binary did not see it (driver or library trouble).
      if grep -q "^\[  SKIPPED \]" "$OUT/tests.log" && nvidia-smi -L >/dev/null 2>&1; then
        echo "FAIL: tests skipped although nvidia-smi sees a GPU" | tee -a "$OUT/summary.log"
        status=1
      fi
      ;;
    memcheck | racecheck)
      # Not the CUPTI trace: under compute-sanitizer CUPTI refuses to start (MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, H100).
      if [ "$step" = memcheck ]; then filter=${SAN_FILTER:-'*:-KernelTraceGpu.*'}
      else filter=${SAN_FILTER:-'CudaNorm.*:CudaEmbedding.*:CudaLoss.*:CudaDeterminism.*:CudaOptimizer.Sum*'}; fi
      note "compute-sanitizer --tool $step ($filter)"
      start=$(date +%s.%N)
      run "$SANITIZER" --tool "$step" --error-exitcode 3 "$EXE" --gtest_brief=1 --gtest_filter="$filter" \
        >"$OUT/sanitize_$step.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && status=1
      { echo "exit $rc, $(elapsed "$start") s"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |Invalid|Race|hazard|Program hit" \
          "$OUT/sanitize_$step.log" | sort | uniq -c | head -30; } | tee -a "$OUT/summary.log"
      ;;
    *)
      echo "unknown step $step (info tests memcheck racecheck; or: pack BUILD_DIR)" >&2
      status=2
      ;;
  esac
done
exit $status
