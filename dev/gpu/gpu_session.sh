#!/usr/bin/env bash
# One device call's worth of GPU validation, run on the GPU machine from the repo root, steps in priority order under a
# deadline so that a call cut short still returns what it reached:
#   flash   dev/gpu/gpu_flash.sh tests sanitize on NEW's flash binaries (every forced switch, racecheck, memcheck)
#   gtests  every test_* binary in NEW (op layer, model, training on the GPU), and tests/python/test_vlm_flash.py
#           when NEW has libvlm_flash_c.so
#   checks  dev/gpu/gpu_train_check.sh curve demo repro on NEW's vlm, fp32 then bf16: the 20-step loss curve against
#           the CPU's, the demo config's held-out VQA, and two runs repeating bit for bit, each against its bound
#   ab      dev/gpu/gpu_ab.sh OLD NEW bench_attention at the model's two shapes and the 1k-8k sweep (needs OLD)
#   ibench  bench/peers/attention_interleaved.py: NEW's libvlm_flash_c.so and cuDNN in one process, the sides
#           alternating row by row (s >= 2k of the attention sweep; IBENCH_ARGS replaces the arguments)
#   fswitch dev/gpu/gpu_flash.sh switches: NEW's bench_attention under each undecided attention switch against its
#           default, one binary (SWITCHES and AB_ROUNDS as gpu_flash.sh reads them)
#   fbench  dev/gpu/gpu_flash.sh bench: the attention sweep with the PyTorch SDPA peers
#   train   dev/gpu/gpu_train_check.sh bench: the PyTorch training peer (eager, torch.compile), then NEW's
#           `vlm bench train --peer`, the peer cut a minute before the deadline's end
#   trainab NEW's `vlm bench train` against OLD's (NEW's own when OLD is unset) and under each switch of
#           TRAINAB_VARIANTS (gpu_ab.sh's AB_VARIANTS, default "VLM_ATTENTION_FLASH=0"; "" for none),
#           AB_ROUNDS rounds, no peer: samples/s per switch
#   dev/gpu/gpu_session.sh [step...]          (default: flash gtests checks ab ibench fbench train; trainab and
#                                             fswitch on request)
# Environment: NEW (a folder packed by dev/gpu/gpu_pack.sh, or its .tar.xz; default .carry/next), OLD (the same, for
# ab and trainab; unset: ab is skipped, trainab compares NEW with itself), DEADLINE (seconds from the start after
# which no step starts, default 500), TRAIN_MIN (seconds the train step needs, torch.compile included, default 240:
# with less left it is skipped, not cut),
# FLASH_TEST_ENVS and FLASH_SAN_PASSES (passed to gpu_flash.sh by the flash step: its forced-switch test runs and
# sanitizer passes; the full lists take ~10 minutes on an H100),
# AB_ROUNDS (default 2), OUT (default ./gpu_session_out).
# Why: the device tool returns only the last 12,000 characters of output and a few files. Each step's full log stays in
# $OUT/logs (dropped when the step passed, unless KEEP_LOGS=1), its summary lines go to $OUT/session.log, and
# session.log is printed once more at the very end, so the tail holds every step's result.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)  # the sibling scripts; bench/peers/ is read from the working directory
t0=$(date +%s)
DEADLINE=${DEADLINE:-500}
TRAIN_MIN=${TRAIN_MIN:-240}
OUT=${OUT:-gpu_session_out}
mkdir -p "$OUT/logs"
session="$OUT/session.log"
: >"$session"
elapsed() { echo $(($(date +%s) - t0)); }
left() { echo $((DEADLINE + 60 - $(elapsed))); }  # a step started before the deadline may run a minute past it
say() { printf '%s\n' "$*" | tee -a "$session"; }

# A pack folder, unpacking NAME.tar.xz into /tmp when that is what exists (the GPU machine may lack xz).
unpack() {
  local p=${1%.tar.xz}
  if [ -d "$p" ]; then echo "$p"; return; fi
  [ -f "$p.tar.xz" ] || { echo "gpu_session: no pack at $p or $p.tar.xz" >&2; return 1; }
  python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$p.tar.xz" || return 1
  echo "/tmp/$(basename "$p")"
}
NEW_DIR=$(unpack "${NEW:-.carry/next}") || exit 2
OLD_DIR=""
if [ -n "${OLD:-}" ]; then OLD_DIR=$(unpack "$OLD") || exit 2; fi
export LD_LIBRARY_PATH="$NEW_DIR/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.limit --format=csv,noheader 2>&1 \
  | sed 's/^/gpu: /' | tee -a "$session"

status=0
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(flash gtests checks ab ibench fbench train)
for step in "${steps[@]}"; do
  if [ "$(elapsed)" -gt "$DEADLINE" ]; then
    say "== $step: not started (deadline ${DEADLINE} s reached)"
    continue
  fi
  say "== $step [$(elapsed) s]"
  log="$OUT/logs/$step.log"
  rc=0
  case $step in
    flash)
      FLASH_BIN=$NEW_DIR OUT="$OUT/logs/flash" STEP_TIMEOUT=$(($(left) / 4 > 60 ? $(left) / 4 : 60)) \
        "$here/gpu_flash.sh" tests sanitize >"$log" 2>&1 || rc=$?
      sed -n '/^==== summary/,$p' "$log" | grep -vE '^==== summary|^$' | tee -a "$session" >/dev/null ;;
    gtests)
      for t in "$NEW_DIR"/test_*; do
        [ -x "$t" ] || continue
        timeout -k 5 "$(($(left) > 30 ? $(left) : 30))" "$t" >"$OUT/logs/$(basename "$t").log" 2>&1 || rc=1
        say "$(basename "$t"): $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/logs/$(basename "$t").log" | tr '\n' ' ')"
      done
      if [ -f "$NEW_DIR/libvlm_flash_c.so" ]; then  # the PyTorch binding against PyTorch's attention
        timeout -k 5 120 python3 "$here/../../tests/python/test_vlm_flash.py" --lib "$NEW_DIR/libvlm_flash_c.so" \
          >"$OUT/logs/test_vlm_flash.log" 2>&1 || rc=1
        say "test_vlm_flash.py: $(tail -1 "$OUT/logs/test_vlm_flash.log")"
      fi ;;
    checks)
      if [ ! -x "$NEW_DIR/vlm" ]; then say "(no vlm in NEW: skipped)"; continue; fi
      for precision in fp32 bf16; do
        gpu_set=""
        [ "$precision" = bf16 ] && gpu_set=train.precision=bf16
        GPU_SET=$gpu_set VLM_BIN=$NEW_DIR OUT="$OUT/checks_$precision" "$here/gpu_train_check.sh" curve demo repro \
          >>"$log" 2>&1 || rc=1
        grep -E "^====|max relative|floor|losses|FAIL" "$OUT/checks_$precision/summary.log" \
          | tee -a "$session" >/dev/null
      done ;;
    ab)
      if [ -z "$OLD_DIR" ]; then say "(no OLD pack: skipped)"; continue; fi
      shapes=("--head-dims 64 --seqlens 177 --tokens 11328 --hidden 576 --kv-heads 3 --causal yes"
              "--head-dims 64 --seqlens 196 --tokens 12544 --hidden 768 --causal no"
              "--head-dims 64,128 --causal both --seqlens 1024,2048,4096,8192")
      for args in "${shapes[@]}"; do
        # shellcheck disable=SC2086  # the shape's words are separate arguments
        AB_GREP='^d=' ROUNDS=${AB_ROUNDS:-2} AB_TIMEOUT=120 "$here/gpu_ab.sh" "$OLD_DIR/bench_attention" \
          "$NEW_DIR/bench_attention" $args >>"$log" 2>&1 || rc=1
      done
      python3 "$here/ab_summary.py" "$log" | tee -a "$session" >/dev/null || rc=1 ;;
    ibench)
      if [ ! -f "$NEW_DIR/libvlm_flash_c.so" ]; then say "(no libvlm_flash_c.so in NEW: skipped)"; continue; fi
      read -r -a iargs <<<"${IBENCH_ARGS:---seqlens 2048,4096,8192,16384}"
      PYTHONUNBUFFERED=1 timeout -k 5 "$(($(left) > 60 ? $(left) : 60))" python3 bench/peers/attention_interleaved.py \
        --lib "$NEW_DIR/libvlm_flash_c.so" "${iargs[@]}" >"$log" 2>&1 || rc=1
      grep -E '^\||^#' "$log" | tee -a "$session" >/dev/null ;;
    fswitch)
      FLASH_BIN=$NEW_DIR OUT="$OUT/fswitch" STEP_TIMEOUT=120 "$here/gpu_flash.sh" switches >"$log" 2>&1 || rc=$?
      grep -E '^row |^d=|^====' "$OUT/fswitch/summary.log" | tee -a "$session" >/dev/null ;;
    fbench)
      FLASH_BIN=$NEW_DIR OUT="$OUT/fbench" STEP_TIMEOUT=$(($(left) / 2 > 60 ? $(left) / 2 : 60)) \
        "$here/gpu_flash.sh" bench >"$log" 2>&1 || rc=$?
      sed -n '/^==== summary/,$p' "$log" | grep -E '^\||SM clock|Error|error' | tee -a "$session" >/dev/null ;;
    trainab)
      if [ ! -x "$NEW_DIR/vlm" ]; then say "(no vlm in NEW: skipped)"; continue; fi
      variants=${TRAINAB_VARIANTS-VLM_ATTENTION_FLASH=0}
      old_vlm=$NEW_DIR/vlm
      [ -n "$OLD_DIR" ] && [ -x "$OLD_DIR/vlm" ] && old_vlm=$OLD_DIR/vlm
      AB_GREP='^vlm\.cpp' ROUNDS=${AB_ROUNDS:-2} AB_TIMEOUT=180 AB_VARIANTS=$variants \
        "$here/gpu_ab.sh" "$old_vlm" "$NEW_DIR/vlm" bench train --steps 20 --warmup 5 --profile-steps 1 \
        --trace-steps 0 >>"$log" 2>&1 || rc=1
      python3 "$here/ab_summary.py" "$log" | tee -a "$session" >/dev/null || rc=1 ;;
    train)
      if [ "$(left)" -lt "$TRAIN_MIN" ]; then say "(only $(left) s left, TRAIN_MIN $TRAIN_MIN: skipped)"; continue; fi
      VLM_BIN=$NEW_DIR OUT="$OUT/train" PEER_TIMEOUT=$(($(left) - 60)) BENCH_TIMEOUT=90 \
        "$here/gpu_train_check.sh" bench >"$log" 2>&1 || rc=1
      grep -E "^peer: exit|samples/s|ours / peer|^vlm\.cpp|^pytorch|breakdown|\(gaps" "$OUT/train/summary.log" \
        | tee -a "$session" >/dev/null ;;
    *)
      say "unknown step $step"
      rc=2 ;;
  esac
  say "-- $step: exit $rc [$(elapsed) s]"
  if [ "$rc" -ne 0 ]; then
    status=1
  elif [ "${KEEP_LOGS:-0}" != 1 ]; then  # a passed step's logs: its summary lines are in session.log
    rm -f "$log"
    [ "$step" = flash ] && rm -rf "$OUT/logs/flash"
    [ "$step" = gtests ] && rm -f "$OUT/logs"/test_*.log
  fi
done
printf '\n==== session summary (%s)\n' "$session"
cat "$session"
exit $status
