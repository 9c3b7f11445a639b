#!/usr/bin/env bash
# FSDP on one GPU, run on the GPU machine from the repo root with a CUDA build:
#   1. tests: test_train_gpu's FsdpGpu cases (full_shard and shard_grad_op train no_shard's losses bit for bit, fp32
#      and bf16; FSDP through NCCL in a world of one keeps the collectives' order on NCCL's stream and trains the
#      local run's losses bit for bit) and test_kernels_cuda's CudaQuant (the fp8 gather's kernels against the CPU);
#   2. speed: the nanoVLM-222M shape in bf16 on the shapes dataset, STEPS steps (default 40): no_shard (the
#      single-GPU step, no launcher), shard_grad_op and full_shard (a world of one without a launcher: local copies),
#      full_shard through NCCL with world size 1 under `vlm launch --nproc 1` and under a MASTER_ADDR / RANK /
#      WORLD_SIZE environment, and full_shard through NCCL with fp8 weight gathers; prints each run's median
#      samples/s over the steps after the first 10 and its ratio to no_shard, the first-step memory per category
#      (memory.json) and the final loss.
#   dev/gpu/fsdp_check.sh [tests] [speed]        (default: both)
# Environment: VLM (default build-cuda/apps/vlm/vlm), TEST_BIN (default build-cuda/tests/train/test_train_gpu),
# KERNEL_TEST_BIN (default build-cuda/tests/kernels/cuda/test_kernels_cuda), OUT (default ./fsdp_out), STEPS, BATCH
# (default 8). NCCL: libnccl.so.2 from the loader's path, else PyTorch's wheel (VLM_NCCL_LIB).
# Build first: cmake --preset cuda && cmake --build build-cuda --target vlm test_train_gpu test_kernels_cuda
set -uo pipefail
VLM=${VLM:-build-cuda/apps/vlm/vlm}
TEST_BIN=${TEST_BIN:-build-cuda/tests/train/test_train_gpu}
KERNEL_TEST_BIN=${KERNEL_TEST_BIN:-build-cuda/tests/kernels/cuda/test_kernels_cuda}
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared machines
if [ -z "${VLM_NCCL_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  torch_nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' \
               2>/dev/null || true)
  if [ -n "$torch_nccl" ] && [ -f "$torch_nccl" ]; then export VLM_NCCL_LIB=$torch_nccl; fi
fi
OUT=${OUT:-fsdp_out}
STEPS=${STEPS:-40}
BATCH=${BATCH:-8}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests speed)
status=0
for step in "${steps[@]}"; do
  case $step in
    tests)
      "$TEST_BIN" --gtest_filter='FsdpGpu.*' 2>&1 | tee "$OUT/tests.log" | grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) " \
        || status=1
      grep -q "\[  PASSED  \] 2 tests" "$OUT/tests.log" || { echo "FsdpGpu did not pass (both cases must run)"; status=1; }
      "$KERNEL_TEST_BIN" --gtest_filter='CudaQuant.*' 2>&1 | tee "$OUT/quant.log" | grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) " \
        || status=1
      grep -q "\[  PASSED  \] 1 test" "$OUT/quant.log" || { echo "CudaQuant did not pass"; status=1; } ;;
    speed)
      data=data/shapes
      if [ ! -f "$data/.done-50000" ]; then
        rm -rf "$data"
        "$VLM" data synth shapes --out "$data/train" --samples 50000 --seed 1 >"$OUT/data.log" 2>&1
        "$VLM" data tokenizer-train --shards "$data/train" --out "$data/tokenizer.json" --vocab-size 384 \
          --max-samples 5000 >>"$OUT/data.log" 2>&1
        touch "$data/.done-50000"
      fi
      run() {  # NAME [launcher words ...] :: [--set ...]
        local name=$1; shift
        local pre=()
        while [ "$1" != "::" ]; do pre+=("$1"); shift; done
        shift
        rm -rf "$OUT/$name"
        "${pre[@]}" "$VLM" train --config configs/shapes-tiny.toml --run-dir "$OUT/$name" \
          --set model.preset=nanovlm-222m --set train.device=cuda --set train.precision=bf16 --set "train.steps=$STEPS" \
          --set "train.batch_size=$BATCH" --set train.log_every=1 --set train.ckpt_every=0 --set data.val_shards= \
          "$@" >"$OUT/$name.log" 2>&1 || { echo "$name: training failed (see $OUT/$name.log)"; status=1; }
      }
      for s in no_shard shard_grad_op full_shard; do run "$s" env :: --set train.fsdp=$s; done
      # FSDP through the NCCL backend, world size 1: `vlm launch --nproc 1` (TCP-store rendezvous), then a
      # torchrun-style environment set by hand.
      run nccl_full_shard "$VLM" launch --nproc 1 -- :: --set train.fsdp=full_shard
      run nccl_env_full_shard env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=29533 :: --set train.fsdp=full_shard
      run nccl_full_shard_fp8 "$VLM" launch --nproc 1 -- :: --set train.fsdp=full_shard \
        --set train.fsdp_allgather_dtype=fp8_e4m3
      for name in nccl_full_shard nccl_env_full_shard nccl_full_shard_fp8; do  # NCCL must have been used
        grep -q "1 rank(s) over nccl" "$OUT/$name.log" || { echo "$name: did not run over NCCL ($OUT/$name.log)"; status=1; }
      done
      python3 - "$OUT" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
rates = {}
for s in ("no_shard", "shard_grad_op", "full_shard", "nccl_full_shard", "nccl_env_full_shard", "nccl_full_shard_fp8"):
    path = os.path.join(out, s, "metrics.jsonl")
    if not os.path.exists(path):
        continue
    recs = [json.loads(l) for l in open(path)]
    train = [r for r in recs if "samples_per_s" in r]
    rates[s] = statistics.median(r["samples_per_s"] for r in train[10:] or train)
    mem = json.load(open(os.path.join(out, s, "memory.json")))
    m = mem["fsdp"]["ranks"][0]["measured"]
    print(f"{s}: {rates[s]:.1f} samples/s ({rates[s] / rates.get('no_shard', rates[s]):.3f} x no_shard), "
          f"final loss {train[-1]['loss']:.4f}, activations peak {mem['activations_peak_bytes'] / 2**20:.0f} MiB, "
          + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in m.items()))
PY
      ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
