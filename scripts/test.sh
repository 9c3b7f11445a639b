#!/usr/bin/env bash
# Installs dependencies, builds (CPU preset) and runs every CPU test. Then checks that the CUDA preset compiles
# when nvcc is available (GPU code must never rot, even without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install_deps.sh
scripts/build.sh cpu
(cd build && ctest -L cpu --output-on-failure -j "$(nproc)" --timeout 600)
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  echo "[test] compiling the cuda preset (sm_90a; FlashAttention's portable path in bf16 only)"
  # The f16 instantiations are the bf16 templates with another element type and take a third of the CUDA compile
  # (about 4 CPU-minutes each): the check compiles bf16 only. A user's build keeps both (VLM_FLASH_DTYPES).
  cmake --preset cuda -DVLM_FLASH_DTYPES=bf16 >/dev/null
  scripts/build.sh cuda
else
  echo "[test] nvcc not found: skipping the cuda preset compile"
fi
echo "[test] done in $(( $(date +%s) - start )) s"
