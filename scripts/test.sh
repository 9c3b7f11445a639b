#!/usr/bin/env bash
# Installs dependencies, builds and runs every CPU test. With nvcc available it builds the CUDA preset (so GPU code
# never rots, even without a GPU) and runs the CPU tests from that build: its binaries run every CPU path, and their
# GPU tests skip without a device, so one build serves both; the CPU-only preset then compiles just the kernel library
# and its tests, for the no-CUDA dispatch path (an op on a CUDA tensor aborts in such a build). Without nvcc: the CPU
# preset, all of it.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install_deps.sh
run_cpu_tests() { (cd "$1" && ctest -L cpu --output-on-failure -j "$(nproc)" --timeout 600); }
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  echo "[test] building the cuda preset (sm_90a; FlashAttention's portable path in bf16 only)"
  # The f16 instantiations are the bf16 templates with another element type and take a third of the CUDA compile
  # (about 4 CPU-minutes each): the check compiles bf16 only. A user's build keeps both (VLM_FLASH_DTYPES).
  cmake --preset cuda -DVLM_FLASH_DTYPES=bf16 >/dev/null
  scripts/build.sh cuda
  run_cpu_tests build-cuda
  echo "[test] the cpu preset's kernel tests (the dispatch of a build without CUDA)"
  scripts/build.sh cpu --target test_kernels
  (cd build && ctest -R '^Dispatch\.' --output-on-failure --timeout 600)
else
  echo "[test] nvcc not found: the cpu preset only"
  scripts/build.sh cpu
  run_cpu_tests build
fi
echo "[test] done in $(( $(date +%s) - start )) s"
