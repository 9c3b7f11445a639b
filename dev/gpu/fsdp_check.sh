#!/usr/bin/env bash
# FSDP on one GPU (a world of one: gathers and reduce-scatters are device copies until the NCCL backend lands), run
# on the GPU machine from the repo root with a CUDA build:
#   1. tests: test_train_gpu's FsdpGpu case (full_shard and shard_grad_op train no_shard's losses bit for bit, fp32
#      and bf16, the fixture's tiny model);
#   2. speed: the nanoVLM-222M shape in bf16 on the shapes dataset, STEPS steps (default 40) under each strategy;
#      prints each strategy's median samples/s over the steps after the first 10 and its ratio to no_shard (today's
#      single-GPU step), the first-step memory per category (memory.json) and the final loss of each.
#   dev/gpu/fsdp_check.sh [tests] [speed]        (default: both)
# Environment: VLM (default build-cuda/apps/vlm/vlm), TEST_BIN (default build-cuda/tests/train/test_train_gpu),
# OUT (default ./fsdp_out), STEPS, BATCH (default 8).
# Build first: cmake --preset cuda && cmake --build build-cuda --target vlm test_train_gpu
set -uo pipefail
VLM=${VLM:-build-cuda/apps/vlm/vlm}
TEST_BIN=${TEST_BIN:-build-cuda/tests/train/test_train_gpu}
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
      grep -q "\[  PASSED  \] 1 test" "$OUT/tests.log" || { echo "FsdpGpu did not pass"; status=1; } ;;
    speed)
      data=data/shapes
      if [ ! -f "$data/.done-50000" ]; then
        rm -rf "$data"
        "$VLM" data synth shapes --out "$data/train" --samples 50000 --seed 1 >"$OUT/data.log" 2>&1
        "$VLM" data tokenizer-train --shards "$data/train" --out "$data/tokenizer.json" --vocab-size 384 \
          --max-samples 5000 >>"$OUT/data.log" 2>&1
        touch "$data/.done-50000"
      fi
      for s in no_shard shard_grad_op full_shard; do
        rm -rf "$OUT/$s"
        "$VLM" train --config configs/shapes-tiny.toml --run-dir "$OUT/$s" --set model.preset=nanovlm-222m \
          --set train.device=cuda --set train.precision=bf16 --set train.fsdp=$s --set "train.steps=$STEPS" \
          --set "train.batch_size=$BATCH" --set train.log_every=1 --set train.ckpt_every=0 --set data.val_shards= \
          >"$OUT/$s.log" 2>&1 || { echo "$s: training failed (see $OUT/$s.log)"; status=1; }
      done
      python3 - "$OUT" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
rates = {}
for s in ("no_shard", "shard_grad_op", "full_shard"):
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
