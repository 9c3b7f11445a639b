#!/usr/bin/env bash
# The NCCL communicator on the GPU machine: its GPU tests (every collective and dtype against the CPU, stream
# ordering, the rendezvous-store bootstrap, the watchdog); the collectives driver's closed-form checks on GPU
# tensors, alone and under `vlm launch` with one rank per visible GPU (the TCP-store bootstrap; several ranks where
# the machine has several GPUs); then `vlm bench comm` at 64 MiB (all_gather, reduce_scatter, all_reduce; alone
# beside a device copy's bandwidth, and under `vlm launch`). Packed here with
#   dev/gpu/gpu_pack.sh .carry/nccl build-cuda/tests/dist/test_dist_nccl \
#     build-cuda/tests/dist/dist_collectives_driver build-cuda/apps/vlm/vlm
# and run there as dev/gpu/nccl_check.sh .carry/nccl. A skipped GPU test fails the check: on the GPU machine each
# must run. NCCL comes from the loader's path, else from PyTorch's wheel (nvidia/nccl/lib), through VLM_NCCL_LIB.
set -euo pipefail
dir=${1:?usage: dev/gpu/nccl_check.sh DIR (the packed binaries)}
export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared machines
if [ -z "${VLM_NCCL_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  torch_nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' \
               2>/dev/null || true)
  if [ -n "$torch_nccl" ] && [ -f "$torch_nccl" ]; then export VLM_NCCL_LIB=$torch_nccl; fi
fi
echo "[nccl_check] NCCL: ${VLM_NCCL_LIB:-libnccl.so.2 from the loader path}"
nvidia-smi -L || true

echo "[nccl_check] GPU tests (world of one)"
out=$("$dir/test_dist_nccl" 2>&1) || { echo "$out"; echo "[nccl_check] FAIL: GPU tests"; exit 1; }
echo "$out" | tail -n 12
if echo "$out" | grep -q "SKIPPED \]"; then echo "[nccl_check] FAIL: GPU tests skipped on the GPU machine"; exit 1; fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || gpus=1
echo "[nccl_check] closed-form checks of every collective on GPU tensors, alone and on $gpus rank(s)"
"$dir/dist_collectives_driver" check-gpu
out=$("$dir/vlm" launch --nproc "$gpus" -- "$dir/dist_collectives_driver" check-gpu) ||
  { echo "$out"; echo "[nccl_check] FAIL: GPU collectives under vlm launch"; exit 1; }
echo "$out"
passed=$(echo "$out" | grep -c "of $gpus (nccl): .* 0 failed" || true)
[ "$passed" -eq "$gpus" ] || { echo "[nccl_check] FAIL: $passed of $gpus ranks passed"; exit 1; }

echo "[nccl_check] bandwidth, one rank"
"$dir/vlm" bench comm --device cuda --min-bytes 64M --max-bytes 64M --iters 20
echo "[nccl_check] bandwidth under vlm launch --nproc $gpus (TCP-store bootstrap)"
"$dir/vlm" launch --nproc "$gpus" -- "$dir/vlm" bench comm --device cuda --min-bytes 64M --max-bytes 64M --iters 20
echo "[nccl_check] PASS"
