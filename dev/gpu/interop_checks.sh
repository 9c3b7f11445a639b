#!/usr/bin/env bash
# One device call's worth of the GPU-machine checks of the Hugging Face interop, the tracking and the inference engine,
# run from the repo root, steps in priority order under a deadline so that a call cut short still returns what it
# reached:
#   fixtures  dev/gpu/hf_parity.sh: transformers makes tests/model/fixtures/hf when absent (returned as
#             $OUT/hf_fixtures.tar), then test_hf_parity, test_hf_parity_gpu and the export -> transformers round trip
#   tokfix    dev/fixtures/make_tokenizer_fixtures.py, returned as $OUT/tokenizer_fixtures.tar (tokenizers' and
#             transformers' encodings, chat templates and the Idefics3 tile layout, for
#             tests/data/tokenizer/fixtures/hf/expected)
#   tb        dev/gpu/check_tensorboard.py on $TB_RUN (a run directory made on the CPU and carried): TensorBoard's
#             own loader reads our event files
#   paged     test_kernels_cuda's paged KV and argmax cases, then test_engine_gpu
#   fused     test_kernels_cuda's decode-step kernels: the fused linear GEMV, the GEMMs around it, the packed QKV
#             split (and its paged write), the paged cases, the device picks (argmax, Gumbel-max sampling)
#   sanitize  compute-sanitizer memcheck and racecheck over the paged kernel cases
#   gtests    the other test binaries in the pack (model, training, recompute, flash, the whole kernel suite)
#   finetune  dev/gpu/hf_finetune.sh: full-size random SmolVLM-256M and nanoVLM-222M checkpoints train in bf16
#   graphs    test_decode_graphs_gpu (decode steps replayed from CUDA graphs against the same ops run eagerly) and
#             test_engine_gpu
#   decode    bench/peers/decode_peer.py (transformers generate, eager and static cache + torch.compile; PEER_ARGS
#             adds flags, e.g. "--modes static_compile"), then `vlm bench decode --peer` on the same shapes with
#             CUDA graphs and with --eager (DECODE_ARGS adds flags, e.g. "--shapes text --trace 20"); figures in
#             logs/decode_*.jsonl
#   nccl      dev/gpu/nccl_check.sh on the pack (test_dist_nccl, dist_collectives_driver, vlm bench comm)
#   serve     dev/gpu/serve_bench.sh: vlm serve of a nanoVLM-222M-shaped run under load (SERVE_CONCURRENCY,
#             SERVE_SECONDS)
#   fsdp      dev/gpu/fsdp_check.sh: the FSDP GPU test and the nanoVLM-222M step under each strategy (FSDP_STEPS)
#   coldstart a nanoVLM-222M-shaped run trained one step, then `vlm generate` of one token with an image, timed from
#             process start to exit (the checkpoint read, CUDA initialised, the image encoded, the prompt prefilled)
#   dev/gpu/interop_checks.sh [step...]       (default: fixtures tokfix tb paged sanitize gtests finetune)
# Environment: PACK (a folder or .tar.xz made by dev/gpu/gpu_pack.sh holding vlm and the test binaries, default
# .carry/interop), TB_RUN (default .carry/fx/tbrun), DEADLINE (seconds after which no step starts, default 540),
# PEER_SECONDS (the decode peer's --max-seconds, default 300), STEP_TIMEOUT (seconds after which a step is killed, a
# hung kernel included; default 600), DECODE_BATCHES (default 1,32,128), OUT (default
# ./interop_out). Each step's log is logs/<step>.log in $OUT/logs.tar; one summary line per step goes to
# $OUT/session.log, printed again at the end.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
DEADLINE=${DEADLINE:-540}
OUT=${OUT:-interop_out}
TB_RUN=${TB_RUN:-.carry/fx/tbrun}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
session="$OUT/session.log"
: >"$session"
elapsed() { echo $(($(date +%s) - t0)); }
say() { printf '%s\n' "$*" | tee -a "$session"; }
# The device tool returns at most 8 files: the step logs travel as one tar, also when the call is cut short.
pack_logs() { [ -d "$OUT/logs" ] && tar -cf "$OUT/logs.tar" -C "$OUT" logs && rm -rf "$OUT/logs"; }
trap pack_logs EXIT
trap 'exit 124' TERM

pack=${PACK:-.carry/interop}
pack=${pack%.tar.xz}
if [ ! -d "$pack" ]; then
  python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$pack.tar.xz" || exit 2
  pack=/tmp/$(basename "$pack")
fi
BIN=$(cd "$pack" && pwd)
system_ld_path=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | sed 's/^/gpu: /' \
  | tee -a "$session"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  2>&1 | tee -a "$session"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# run STEP COMMAND...: runs COMMAND with its output in the step's log; one summary line with the status and time.
status=0
run_step() {
  local step=$1 s0 rc
  shift
  s0=$(date +%s)
  # A watchdog kills the step (the function's subshell and its children: a hung kernel's process) past STEP_TIMEOUT.
  "$@" >"$OUT/logs/$step.log" 2>&1 &
  local pid=$! dog
  (sleep "${STEP_TIMEOUT:-600}" && pkill -KILL -P "$pid"; kill -KILL "$pid") 2>/dev/null &
  dog=$!
  wait "$pid"
  rc=$?
  pkill -P "$dog" 2>/dev/null
  kill "$dog" 2>/dev/null
  [ $rc -eq 0 ] || status=1
  say "$step: exit $rc in $(($(date +%s) - s0)) s"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|ERROR SUMMARY|falls|DOES NOT|hf_parity:|rel|missing|cold start|nccl_check\]|GB/s|req/s|tok/s|samples/s|FsdpGpu|strategy" \
    "$OUT/logs/$step.log" | grep -v "^\[  SKIPPED \] .*ms)$" | tail -25 | sed "s/^/  $step| /" | tee -a "$session"
}
step_fixtures() {
  local made=0 rc
  [ -f tests/model/fixtures/hf/manifest.json ] || made=1
  FIXTURES=tests/model/fixtures/hf HF_BIN=$BIN OUT=/tmp/hf_parity bash "$here/hf_parity.sh"
  rc=$?
  cp /tmp/hf_parity/summary.log "$OUT/hf_parity_summary.log" 2>/dev/null
  # Fixtures made here travel back as one file (the device tool returns few, shallow files).
  [ $made = 0 ] || tar -cf "$OUT/hf_fixtures.tar" -C tests/model/fixtures hf
  return $rc
}
step_tokfix() {
  python3 dev/fixtures/make_tokenizer_fixtures.py --out /tmp/tokenizer_fixtures &&
    tar -cf "$OUT/tokenizer_fixtures.tar" -C /tmp tokenizer_fixtures
}
step_tb() { python3 "$here/check_tensorboard.py" "$TB_RUN"; }
step_paged() {
  local rc=0
  "$BIN/test_kernels_cuda" --gtest_filter='*Paged*:*Argmax*' || rc=1
  "$BIN/test_engine_gpu" || rc=1
  return $rc
}
step_fused() { "$BIN/test_kernels_cuda" --gtest_filter='CudaFusedLinear*:CudaGemm*:CudaPacked*:CudaPaged*:*QkvSplit*:*Gumbel*:*Argmax*'; }
step_sanitize() {
  local rc=0 tool
  for tool in memcheck racecheck; do
    "$sanitizer" --tool "$tool" --error-exitcode 3 "$BIN/test_kernels_cuda" \
      --gtest_filter='CudaPaged*:*Argmax*:-*BadIndices*' || rc=1
  done
  return $rc
}
step_gtests() {
  local rc=0 t
  for t in test_kernels_cuda test_model_gpu test_train_gpu test_recompute_gpu flash_gpu_test; do
    [ -x "$BIN/$t" ] || continue
    echo "== $t"
    "$BIN/$t" --gtest_brief=1 || rc=1
  done
  return $rc
}
step_finetune() { HF_BIN=$BIN OUT=/tmp/hf_finetune STEPS=30 bash "$here/hf_finetune.sh"; }
step_decode() {
  local rc=0 d=$OUT/logs
  # shellcheck disable=SC2086  # PEER_ARGS and DECODE_ARGS are lists of flags
  python3 bench/peers/decode_peer.py --batches "${DECODE_BATCHES:-1,32,128}" --max-seconds "${PEER_SECONDS:-300}" \
    ${PEER_ARGS:-} --out "$d/decode_peer.jsonl" || rc=1
  # shellcheck disable=SC2086
  "$BIN/vlm" bench decode --batch "${DECODE_BATCHES:-1,32,128}" --peer "$d/decode_peer.jsonl" ${DECODE_ARGS:-} \
    --json "$d/decode_vlm.jsonl" || rc=1
  # shellcheck disable=SC2086
  "$BIN/vlm" bench decode --eager --batch "${DECODE_BATCHES:-1,32,128}" --peer "$d/decode_peer.jsonl" \
    ${DECODE_ARGS:-} --json "$d/decode_vlm_eager.jsonl" || rc=1
  "$BIN/vlm" bench decode --shapes vlm --batch 32 --same-image --peer "$d/decode_peer.jsonl" \
    --json "$d/decode_vlm_same_image.jsonl" || rc=1
  return $rc
}
step_graphs() {
  local rc=0
  "$BIN/test_decode_graphs_gpu" || rc=1
  "$BIN/test_engine_gpu" || rc=1
  return $rc
}
# Cold start: a nanoVLM-222M-shaped run (one bf16 training step writes its checkpoint), then `vlm generate` of one
# token for one image, timed from before the process starts to its exit, three times.
step_coldstart() {
  local d=/tmp/coldstart img s e i
  rm -rf "$d" && mkdir -p "$d/img"
  "$BIN/vlm" data synth shapes --out "$d/shards" --samples 16 --seed 1 --image-size 224 --shard-size 16 || return 1
  "$BIN/vlm" data tokenizer-train --shards "$d/shards" --out "$d/tok.json" --vocab-size 300 || return 1
  "$BIN/vlm" train --run-dir "$d/run" --quiet --set model.preset=nanovlm-222m --set data.train_shards="$d/shards" \
    --set data.tokenizer="$d/tok.json" --set data.val_shards= --set train.device=cuda --set train.precision=bf16 \
    --set train.steps=1 --set train.batch_size=2 --set train.grad_accum=1 --set train.ckpt_every=1 || return 1
  tar -xf "$d"/shards/*.tar -C "$d/img" 000000000.jpg || return 1
  for i in 1 2 3; do
    s=$(date +%s.%N)
    "$BIN/vlm" generate "$d/run" --prompt "how many shapes are there?" --image "$d/img/000000000.jpg" \
      --max-tokens 1 --device cuda >"$d/answer.json" || return 1
    e=$(date +%s.%N)
    python3 -c "import sys; print(f'cold start {sys.argv[3]}: process start to first token and exit in {float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$s" "$e" "$i"
  done
}
step_nccl() { bash "$here/nccl_check.sh" "$BIN"; }
# vlm serve under load (dev/gpu/serve_bench.sh), two concurrencies by default to fit the call.
step_serve() {
  # serve_bench.sh gives the pack's libraries to vlm alone: its curl needs the system's libcurl.
  LD_LIBRARY_PATH=$system_ld_path SERVE_BIN=$BIN OUT=/tmp/serve_bench CONCURRENCY=${SERVE_CONCURRENCY:-1 32} ROUND_SECONDS=${SERVE_SECONDS:-10} \
    bash "$here/serve_bench.sh"
  local rc=$?
  cp /tmp/serve_bench/serve_bench.jsonl "$OUT/" 2>/dev/null
  return $rc
}
step_fsdp() {
  VLM=$BIN/vlm TEST_BIN=$BIN/test_train_gpu KERNEL_TEST_BIN=$BIN/test_kernels_cuda OUT=/tmp/fsdp_out STEPS=${FSDP_STEPS:-25} bash "$here/fsdp_check.sh"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(fixtures tokfix tb paged sanitize gtests finetune)
for step in "${steps[@]}"; do
  if [ "$(elapsed)" -ge "$DEADLINE" ]; then
    say "$step: not started (deadline ${DEADLINE} s reached at $(elapsed) s)"
    continue
  fi
  run_step "$step" "step_$step"
done
echo "===== session summary ($(elapsed) s)"
cat "$session"
exit $status
