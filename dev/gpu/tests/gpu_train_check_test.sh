#!/usr/bin/env bash
# dev/gpu/gpu_train_check.sh (and gpu_session.sh's checks step) with a stand-in vlm (no GPU): the loss curve passes
# within CURVE_TOL and fails past it (1e-5 fp32, 2e-3 bf16), the demo fails below DEMO_VQA_MIN, the repro step fails
# when two runs' losses differ and runs bf16 with train.deterministic, and the checks step runs all three for fp32
# and bf16 and reports a failure.
# usage: gpu_train_check_test.sh dev/gpu/gpu_train_check.sh dev/gpu/gpu_session.sh
set -uo pipefail
check=$(realpath "$1")
session=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The stand-in: `vlm data ...` does nothing; `vlm train` writes STEPS losses (GPU runs scaled by 1 + STUB_GPU_OFFSET,
# and with STUB_NOISE set, nudged by the process id from step 4 on, so two runs differ) and an eval with STUB_VQA.
mkdir -p "$dir/bin/lib" "$dir/work/data/shapes"
touch "$dir/work/data/shapes/.done-50000"
cat >"$dir/bin/vlm" <<'SCRIPT'
#!/usr/bin/env bash
[ "$1" = data ] && exit 0
echo "$*" >>"$STUB_ARGS_LOG"
dev=cpu run= steps=20
while [ $# -gt 0 ]; do
  case $1 in
    --run-dir) run=$2; shift ;;
    --set) case $2 in train.device=cuda) dev=cuda ;; train.steps=*) steps=${2#train.steps=} ;; esac; shift ;;
  esac
  shift
done
mkdir -p "$run/eval"
off=0
[ "$dev" = cuda ] && off=${STUB_GPU_OFFSET:-0}
noise=0
[ -n "${STUB_NOISE:-}" ] && noise=$(($$ % 97 + 1))
awk -v n="$steps" -v off="$off" -v noise="$noise" 'BEGIN { for (s = 1; s <= n; s++)
  printf("{\"step\": %d, \"loss\": %.12f}\n", s, (6 - 0.001 * s) * (1 + off) + noise * 1e-9 * (s > 3)) }' \
  >"$run/metrics.jsonl"
echo "{\"vqa\": {\"accuracy\": ${STUB_VQA:-0.97}}, \"caption\": {\"cider_d\": 0.9}}" >"$run/eval/final.json"
echo "held-out VQA accuracy: stand-in"
SCRIPT
chmod +x "$dir/bin/vlm"
export STUB_ARGS_LOG="$dir/args.log" REPRO_STEPS=12
cd "$dir/work" || exit 1
run() {  # OUT-name, then VAR=value settings; prints the summary, returns the script's status
  local name=$1
  shift
  env "$@" VLM_BIN="$dir/bin" OUT="$dir/$name" bash "$check" >/dev/null 2>&1
  local rc=$?
  cat "$dir/$name/summary.log"
  return $rc
}

out=$(run ok) || fail "a clean fp32 run failed: $out"
[ "$(grep -c ': ok' <<<"$out")" -eq 3 ] || fail "expected curve, demo and repro ok: $out"
grep -q "the two runs' 12 losses are identical" <<<"$out" || fail "repro did not compare 12 steps: $out"

out=$(run off32 STUB_GPU_OFFSET=1e-4) && fail "fp32 curve 1e-4 off passed: $out"
grep -q "max relative loss difference over 20 steps: 1.000e-04 (tolerance 1e-05: FAIL)" <<<"$out" \
  || fail "no fp32 curve failure line: $out"

: >"$STUB_ARGS_LOG"
out=$(run off16 STUB_GPU_OFFSET=1e-4 GPU_SET=train.precision=bf16) || fail "bf16 curve 1e-4 off failed: $out"
grep -q "(tolerance 0.002: ok)" <<<"$out" || fail "bf16 curve not within 2e-3: $out"
[ "$(grep -c 'train.steps=12 .*train.deterministic=true\|train.deterministic=true.*train.steps=12' "$STUB_ARGS_LOG")" \
  -eq 2 ] || fail "bf16 repro runs without train.deterministic: $(cat "$STUB_ARGS_LOG")"

out=$(run vqa STUB_VQA=0.9) && fail "a demo at 90% VQA passed: $out"
grep -q "held-out VQA 0.9000 caption CIDEr-D 0.9000 (floor 0.95: FAIL)" <<<"$out" || fail "no demo failure line: $out"

out=$(run noisy STUB_NOISE=1) && fail "two differing runs passed repro: $out"
grep -q "FAIL: 9 of 12 losses differ between the runs, first at step 4" <<<"$out" || fail "no repro failure: $out"

# gpu_session.sh checks: both precisions, every bound in the session summary; a failing demo fails the step.
mkdir -p "$dir/stubs"
printf '#!/usr/bin/env bash\necho "Stub GPU"\n' >"$dir/stubs/nvidia-smi"
chmod +x "$dir/stubs/nvidia-smi"
out=$(PATH="$dir/stubs:$PATH" NEW="$dir/bin" OUT="$dir/session" bash "$session" checks)
[ $? -eq 0 ] || fail "checks step failed: $out"
summary=$(sed -n '/^==== session summary/,$p' <<<"$out")
[ "$(grep -c ': ok' <<<"$summary")" -eq 6 ] || fail "checks: expected 6 passing bounds: $summary"
grep -q "cuda train.precision=bf16" <<<"$summary" || fail "checks: no bf16 pass: $summary"
out=$(PATH="$dir/stubs:$PATH" NEW="$dir/bin" OUT="$dir/session2" STUB_VQA=0.5 bash "$session" checks)
[ $? -eq 1 ] || fail "checks with a failing demo did not exit 1: $out"
grep -q "^-- checks: exit 1" <<<"$out" || fail "checks not reported failed: $out"
echo "PASS: gpu_train_check.sh bounds, repro and gpu_session.sh checks"
