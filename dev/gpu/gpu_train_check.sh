#!/usr/bin/env bash
# GPU training checks, run on the GPU machine from the repo root with a prebuilt CUDA `vlm` (see below):
#   1. curve: the demo config for STEPS steps (default 20) on the CPU (fp32 reference) and on the GPU (fp32), and
#      the largest relative loss difference per step; it fails above CURVE_TOL (default 1e-5, or 2e-3 when GPU_SET
#      asks for bf16: measured 1.5e-8 and 3.7e-4 on an H100, 2026-12-06);
#   2. demo: the whole demo config (configs/shapes-tiny.toml) trained on the GPU, with its held-out VQA accuracy
#      and wall time; it fails below DEMO_VQA_MIN (default 0.95: the CPU demo reaches 97.84%, the GPU 96.5-97.3%);
#   2b. repro: the demo config for REPRO_STEPS steps (default 300) twice on the GPU; it fails when any logged loss
#      differs between the two runs. fp32 runs repeat as they are (this check caught autotuned f32 split-K GEMMs);
#      bf16 runs repeat with train.deterministic, which the step then adds (by default they may differ, README);
#   3. tests: every gtest binary packed beside vlm (test_kernels_cuda, test_model_gpu, ...), GPU tests included;
#   4. bench: `vlm bench train` (nanoVLM-222M shape, per-op breakdown) with the PyTorch peer
#      (bench/peers/train_nanovlm.py, eager and torch.compile) measured first in the same run; BENCH_ARGS adds flags.
#   dev/gpu/gpu_train_check.sh [curve] [demo] [repro] [tests] [bench]        (default: curve demo repro)
# Environment: VLM_BIN (default .carry/train: vlm and lib/), OUT (default ./gpu_train_out), STEPS (default 20),
# GPU_SET (extra --set arguments for the GPU runs, e.g. "train.precision=bf16"), TEST_ENVS (VAR=value words: the tests
# step runs every binary once more under each; default none), PEER_TIMEOUT and BENCH_TIMEOUT
# (seconds for the bench step's PyTorch peer and for `vlm bench train`, default 3600 and 600: a run cut by its limit
# is reported, and the peer's finished modes stay in peer.jsonl).
# To prepare the binary on the build machine:
#   cmake --preset cuda && cmake --build build-cuda --target vlm
#   mkdir -p .carry/train/lib && cp build-cuda/apps/vlm/vlm .carry/train/ && \
#     cp -L /usr/lib/x86_64-linux-gnu/lib{turbojpeg,webp,sharpyuv}.so.* .carry/train/lib/
set -uo pipefail
BIN=${VLM_BIN:-.carry/train}
OUT=${OUT:-gpu_train_out}
STEPS=${STEPS:-20}
if [[ ${GPU_SET:-} == *bf16* ]]; then CURVE_TOL=${CURVE_TOL:-2e-3}; else CURVE_TOL=${CURVE_TOL:-1e-5}; fi
DEMO_VQA_MIN=${DEMO_VQA_MIN:-0.95}
read -r -a GPU_EXTRA <<<"${GPU_SET:-}"
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
VLM="$BIN/vlm"
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(curve demo repro)
status=0
note() { printf '\n==== %s\n' "$*" | tee -a "$OUT/summary.log"; }
gpu_sets=()
for s in "${GPU_EXTRA[@]}"; do gpu_sets+=(--set "$s"); done

data=data/shapes  # the curve, demo and repro steps' dataset, made once (the tests and bench steps need none)
# A short run of the demo config (the curve and repro steps; they add the device and the step count): every step's
# loss logged, no checkpoints, no held-out eval.
short_run=(--config configs/shapes-tiny.toml --set train.log_every=1 --set train.ckpt_every=0 --set data.val_shards=)
if [[ " ${steps[*]} " =~ \ (curve|demo|repro)\  ]] && [ ! -f "$data/.done-50000" ]; then
  note "making the shapes dataset"
  rm -rf "$data"
  "$VLM" data synth shapes --out "$data/train" --samples 50000 --seed 1 >>"$OUT/data.log" 2>&1
  "$VLM" data synth shapes --out "$data/val" --samples 1000 --seed 2 >>"$OUT/data.log" 2>&1
  "$VLM" data tokenizer-train --shards "$data/train" --out "$data/tokenizer.json" --vocab-size 384 \
    --max-samples 5000 >>"$OUT/data.log" 2>&1
  touch "$data/.done-50000"
fi

for step in "${steps[@]}"; do
  case $step in
    curve)
      note "curve: $STEPS steps, cpu fp32 vs cuda ${GPU_SET:-fp32}"
      common=("${short_run[@]}" --set "train.steps=$STEPS")
      OMP_NUM_THREADS=8 "$VLM" train "${common[@]}" --set train.device=cpu --run-dir "$OUT/curve_cpu" \
        >"$OUT/curve_cpu.log" 2>&1 || status=1
      "$VLM" train "${common[@]}" --set train.device=cuda "${gpu_sets[@]}" --run-dir "$OUT/curve_gpu" \
        >"$OUT/curve_gpu.log" 2>&1 || status=1
      python3 - "$OUT/curve_cpu/metrics.jsonl" "$OUT/curve_gpu/metrics.jsonl" "$STEPS" "$CURVE_TOL" <<'PY' 2>&1 |
import json, math, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
want, tol = int(sys.argv[3]), float(sys.argv[4])
steps = sorted(set(a) & set(b))
if len(steps) != want:
    sys.exit(f"FAIL: {len(steps)} common logged steps, expected {want} (cpu {len(a)}, gpu {len(b)})")
rel = {s: abs(a[s] - b[s]) / abs(a[s]) if math.isfinite(b[s]) else math.inf for s in steps}
for s in steps:
    print(f"step {s:3d}  cpu {a[s]:.6f}  gpu {b[s]:.6f}  rel {rel[s]:.2e}")
worst = max(rel.values())
verdict = "ok" if worst <= tol else "FAIL"
print(f"max relative loss difference over {len(steps)} steps: {worst:.3e} (tolerance {tol:g}: {verdict})")
sys.exit(0 if worst <= tol else 1)
PY
        tee -a "$OUT/summary.log" || status=1
      ;;
    demo)
      note "demo config on cuda ${GPU_SET:-fp32}"
      start=$(date +%s)
      "$VLM" train --config configs/shapes-tiny.toml --set train.device=cuda "${gpu_sets[@]}" \
        --run-dir "$OUT/demo_gpu" >"$OUT/demo_gpu.log" 2>&1 || status=1
      echo "wall time $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.log"
      tail -3 "$OUT/demo_gpu.log" | tee -a "$OUT/summary.log"
      python3 - "$OUT/demo_gpu/eval/final.json" "$DEMO_VQA_MIN" <<'PY' 2>&1 | tee -a "$OUT/summary.log" || status=1
import json, sys
r, floor = json.load(open(sys.argv[1])), float(sys.argv[2])
ok = r["vqa"]["accuracy"] >= floor
print(f"held-out VQA {r['vqa']['accuracy']:.4f} caption CIDEr-D {r['caption']['cider_d']:.4f} "
      f"(floor {floor:g}: {'ok' if ok else 'FAIL'})")
sys.exit(0 if ok else 1)
PY
      ;;
    repro)
      repro_sets=("${gpu_sets[@]}")
      [[ ${GPU_SET:-} == *bf16* ]] && repro_sets+=(--set train.deterministic=true)
      note "repro: the demo config for ${REPRO_STEPS:-300} steps, twice, on cuda ${repro_sets[*]}"
      for r in 1 2; do
        "$VLM" train "${short_run[@]}" --set "train.steps=${REPRO_STEPS:-300}" --set train.device=cuda \
          "${repro_sets[@]}" --run-dir "$OUT/repro_$r" >"$OUT/repro_$r.log" 2>&1 || status=1
      done
      python3 - "$OUT/repro_1/metrics.jsonl" "$OUT/repro_2/metrics.jsonl" "${REPRO_STEPS:-300}" <<'PY' 2>&1 |
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b, want = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
if len(a) != want or set(a) != set(b):
    sys.exit(f"FAIL: logged steps {len(a)} and {len(b)}, expected {want} each")
diff = [s for s in sorted(a) if a[s] != b[s]]
if diff:
    s = diff[0]
    sys.exit(f"FAIL: {len(diff)} of {want} losses differ between the runs, first at step {s} ({a[s]!r} vs {b[s]!r})")
print(f"the two runs' {want} losses are identical: ok")
PY
        tee -a "$OUT/summary.log" || status=1
      ;;
    tests)
      # Each binary as is, then once more under each of TEST_ENVS (default none).
      read -r -a test_envs <<<"${TEST_ENVS-}"
      for t in "$BIN"/test_*; do
        [ -x "$t" ] || continue
        for e in "" "${test_envs[@]}"; do
          log="$OUT/$(basename "$t")${e:+.${e//[^A-Za-z0-9]/_}}.log"
          note "tests: $(basename "$t") ${e}"
          env ${e:+"$e"} timeout 600 "$t" >"$log" 2>&1 || status=1
          grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$log" | tee -a "$OUT/summary.log"
        done
      done
      ;;
    bench)
      note "bench: PyTorch peer, then vlm bench train ${BENCH_ARGS:-}"
      timeout -k 5 "${PEER_TIMEOUT:-3600}" python3 bench/peers/train_nanovlm.py --modes "${PEER_MODES:-eager,compile}" \
        --steps 20 --warmup 5 >"$OUT/peer.jsonl" 2>"$OUT/peer.log"
      rc=$?
      if [ $rc -ne 0 ]; then
        status=1
        echo "peer: exit $rc$([ $rc = 124 ] && echo ', cut by PEER_TIMEOUT') ($OUT/peer.log)" \
          | tee -a "$OUT/summary.log"
      fi
      read -r -a bench_extra <<<"${BENCH_ARGS:-}"
      # The whole output to its log first, then its head to the summary: a `head` inside the pipe closed it early
      # once the output grew past 60 lines (the kernel trace), cutting the log and failing the step with SIGPIPE.
      timeout -k 5 "${BENCH_TIMEOUT:-600}" "$VLM" bench train --steps 20 --warmup 5 --peer "$OUT/peer.jsonl" \
        --json "$OUT/bench_train.json" "${bench_extra[@]}" >"$OUT/bench_train.log" 2>&1 || status=1
      head -60 "$OUT/bench_train.log" | tee -a "$OUT/summary.log"
      ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
