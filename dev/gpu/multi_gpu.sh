#!/usr/bin/env bash
# The multi-GPU benchmark call, run from the repo root on a machine of 1-8 GPUs (or DEVICE=cpu: CPU ranks over MPI on
# the tiny model, the smoke test this machine can run). First the checks: mpirun is there, NCCL loads (ncclGetVersion
# through VLM_NCCL_LIB, the loader's path or PyTorch's wheel) and NVLink multicast is off (NCCL_NVLS_ENABLE=0: set here
# when unset, refused when set otherwise; TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 likewise).
# Then, for each world size N in $NS, the steps in $STEPS:
#   comm     bench/peers/comm_peer.py under torchrun (torch.distributed over NCCL), then `vlm bench comm --peer` on the
#            same sizes (COMM_MIN..COMM_MAX), N ranks: bus bandwidth of all_gather, reduce_scatter, all_reduce
#   parity   the shapes dataset's first PARITY_STEPS (50) steps: `vlm train` on one device reading N data streams
#            (train.data_streams = N: the samples N ranks read), against `vlm train` on N ranks under each
#            train.fsdp strategy; fp32 and deterministic, so the losses differ only by the reduction order (within
#            PARITY_TOL relative)
#   scaling  `vlm bench train --fsdp full_shard` on N ranks, nanovlm-222m and vlm-1b, BATCH_222M / BATCH_1B samples per
#            rank (weak scaling) against the one-device step of the same batch (the baseline, measured at N = 1:
#            `vlm bench train` without FSDP), beside bench/peers/fsdp2_peer.py (PyTorch FSDP2) on the same ranks;
#            tokens/s per rank and in total, efficiency, peak memory per GPU, FSDP's measured memory vs its formula
# Everything lands in $OUT/multi_gpu.jsonl (one record per measurement, "step" and "n" added) and dev/gpu/
# multi_gpu_summary.py turns it into $OUT/summary.md (ratios to the peers, efficiencies, memory against the formula),
# also when the call is cut short; $OUT/session.log has one line per step, $OUT/logs.tar every step's log and raw
# JSON. The data and the parity runs go to $WORK (their checkpoints are deleted once compared). No step starts after
# DEADLINE seconds.
#   dev/gpu/multi_gpu.sh
# Environment: DEVICE (cuda | cpu, default cuda), NS (world sizes, default 1 and the powers of two up to the GPU count,
# and the count), STEPS (default "comm parity scaling"), VLM (default build-cuda/apps/vlm/vlm; build/apps/vlm/vlm for
# DEVICE=cpu) or PACK (a folder or .tar.xz from dev/gpu/gpu_pack.sh holding vlm), LAUNCHER (mpirun | vlm, default
# mpirun where it is installed, else vlm), OUT (default ./multi_gpu_out), WORK (default /tmp/multi_gpu_work),
# DEADLINE (default 540), COMM_MIN / COMM_MAX (default 1M / 1G; cpu 4K / 256K), COMM_ITERS (20), PARITY_STEPS (50),
# PARITY_TOL (1e-4), BENCH_STEPS (20), BATCH_222M (32), BATCH_1B (16), PRESETS (default "nanovlm-222m vlm-1b"; cpu
# "tiny").
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
DEVICE=${DEVICE:-cuda}
DEADLINE=${DEADLINE:-540}
OUT=${OUT:-multi_gpu_out}
WORK=${WORK:-/tmp/multi_gpu_work}
mkdir -p "$OUT/logs" "$WORK"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
rm -f "$WORK"/*.json "$WORK"/*.jsonl  # this call's figures only (the shapes data is kept)
jsonl="$OUT/multi_gpu.jsonl"
: >"$jsonl"
session="$OUT/session.log"
: >"$session"
elapsed() { echo $(($(date +%s) - t0)); }
say() { printf '%s\n' "$*" | tee -a "$session"; }
summarize() {
  python3 "$here/multi_gpu_summary.py" "$jsonl" >"$OUT/summary.md" 2>>"$session" && cat "$OUT/summary.md"
  # The device tool returns few files: the step logs and raw JSON travel as one tar.
  cp "$WORK"/*.json "$WORK"/*.jsonl "$OUT/logs/" 2>/dev/null
  [ -d "$OUT/logs" ] && tar -cf "$OUT/logs.tar" -C "$OUT" logs && rm -rf "$OUT/logs"
}
trap summarize EXIT
trap 'exit 124' TERM
fail() { say "multi_gpu: $*"; exit 2; }

# --- binaries
if [ -n "${PACK:-}" ]; then
  pack=${PACK%.tar.xz}
  if [ ! -d "$pack" ]; then
    python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$pack.tar.xz" || exit 2
    pack=/tmp/$(basename "$pack")
  fi
  VLM=$(cd "$pack" && pwd)/vlm
  export LD_LIBRARY_PATH="$(dirname "$VLM")/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
if [ "$DEVICE" = cpu ]; then VLM=${VLM:-build/apps/vlm/vlm}; else VLM=${VLM:-build-cuda/apps/vlm/vlm}; fi
[ -x "$VLM" ] || fail "no vlm binary at $VLM (build it, or set VLM or PACK)"
VLM=$(cd "$(dirname "$VLM")" && pwd)/$(basename "$VLM")

export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"  # forwarded to the ranks (mpirun -x)

# --- checks: mpirun, NCCL, NVLink multicast off
if command -v mpirun >/dev/null 2>&1; then
  say "mpirun: $(mpirun --version 2>&1 | head -n 1)"
  LAUNCHER=${LAUNCHER:-mpirun}
elif [ "${LAUNCHER:-}" = mpirun ] || [ "$DEVICE" = cpu ]; then
  fail "mpirun not found (install Open MPI; GPU ranks can also start with LAUNCHER=vlm: vlm launch)"
else
  LAUNCHER=${LAUNCHER:-vlm}
  say "mpirun not found: GPU ranks start with vlm launch (TCP-store rendezvous)"
fi
for v in NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1; do
  name=${v%%=*} want=${v#*=}
  [ -z "${!name:-}" ] && export "$name=$want"
  [ "${!name}" = "$want" ] || fail "$name=${!name}: NVLink multicast must stay off on shared machines ($name=$want)"
done
say "NVLink multicast off: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
torch_ok=0
python3 -c "import torch" 2>/dev/null && torch_ok=1
if [ "$DEVICE" = cuda ]; then
  if [ -z "${VLM_NCCL_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
    torch_nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' \
                 2>/dev/null || true)
    if [ -n "$torch_nccl" ] && [ -f "$torch_nccl" ]; then export VLM_NCCL_LIB=$torch_nccl; fi
  fi
  python3 - "${VLM_NCCL_LIB:-libnccl.so.2}" <<'PY' 2>&1 | tee -a "$session" || fail "NCCL does not load"
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
v = ctypes.c_int()
assert lib.ncclGetVersion(ctypes.byref(v)) == 0, "ncclGetVersion failed"
print(f"NCCL {v.value // 10000}.{v.value // 100 % 100}.{v.value % 100} loads from {sys.argv[1]}")
PY
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "${gpus:-0}" -ge 1 ] || fail "no GPU (nvidia-smi lists none); DEVICE=cpu runs the CPU smoke test"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1 | sed 's/^/gpu: /' | tee -a "$session"
  [ $torch_ok = 1 ] || say "PyTorch not importable: the peers are skipped"
  default_ns=1
  for n in 2 4 8; do [ "$n" -le "$gpus" ] && default_ns="$default_ns $n"; done
  case " $default_ns " in *" $gpus "*) ;; *) default_ns="$default_ns $gpus" ;; esac
  PRESETS=${PRESETS:-nanovlm-222m vlm-1b}
  COMM_MIN=${COMM_MIN:-1M} COMM_MAX=${COMM_MAX:-1G}
  precision=bf16
else
  gpus=0
  torch_ok=0  # the peers need GPUs
  default_ns="1 2"
  PRESETS=${PRESETS:-tiny}
  COMM_MIN=${COMM_MIN:-4K} COMM_MAX=${COMM_MAX:-256K}
  precision=fp32
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
NS=${NS:-$default_ns}
STEPS=${STEPS:-comm parity scaling}
say "world sizes: $NS; steps: $STEPS; device: $DEVICE; vlm: $VLM"

# launch N COMMAND...: N ranks of COMMAND (a world of one runs it alone).
launch() {
  local n=$1
  shift
  if [ "$n" = 1 ]; then "$@"; return; fi
  if [ "$LAUNCHER" = mpirun ]; then
    mpirun -np "$n" --oversubscribe --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
      -x OMP_NUM_THREADS ${VLM_NCCL_LIB:+-x VLM_NCCL_LIB} "$@"
  else
    "$VLM" launch --nproc "$n" -- "$@"
  fi
}
# record STEP N FILE [key=value...]: FILE's JSON lines into multi_gpu.jsonl with "step" and "n" (and the keys) added.
record() {
  python3 - "$@" <<'PY' >>"$jsonl"
import json, sys
step, n, path, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
for line in open(path):
    if line.strip().startswith("{"):
        r = json.loads(line)
        r.update(step=step, n=n, **dict(kv.split("=", 1) for kv in extra))
        print(json.dumps(r))
PY
}

step_comm() {
  local n=$1 rc=0
  local args=(--min-bytes "$COMM_MIN" --max-bytes "$COMM_MAX" --iters "${COMM_ITERS:-20}")
  local peer="$WORK/comm_peer_$n.jsonl" peer_args=()
  rm -f "$peer"
  if [ $torch_ok = 1 ]; then
    torchrun --standalone --nproc_per_node "$n" bench/peers/comm_peer.py "${args[@]}" --out "$peer" || rc=1
    [ -s "$peer" ] && record comm "$n" "$peer" && peer_args=(--peer "$peer")
  fi
  launch "$n" "$VLM" bench comm --device "$DEVICE" "${args[@]}" "${peer_args[@]}" --json "$WORK/comm_$n.jsonl" || rc=1
  [ -s "$WORK/comm_$n.jsonl" ] && record comm "$n" "$WORK/comm_$n.jsonl"
  return $rc
}

# The parity data: the shapes dataset and its tokenizer, made once.
data=$WORK/shapes
make_data() {
  [ -f "$data/.done" ] && return 0
  rm -rf "$data"
  "$VLM" data synth shapes --out "$data/train" --samples 4000 --seed 1 >/dev/null &&
    "$VLM" data tokenizer-train --shards "$data/train" --out "$data/tokenizer.json" --vocab-size 384 \
      --max-samples 2000 >/dev/null && touch "$data/.done"
}
# train N RUN STRATEGY: PARITY_STEPS steps of the shapes run on N ranks reading N data streams.
train() {
  local n=$1 run=$2 strategy=$3 preset=nanovlm-222m batch=8
  [ "$DEVICE" = cpu ] && preset=tiny batch=4
  rm -rf "$run"
  launch "$n" "$VLM" train --config configs/shapes-tiny.toml --run-dir "$run" --quiet --set model.preset=$preset \
    --set data.train_shards="$data/train" --set data.tokenizer="$data/tokenizer.json" --set data.val_shards= \
    --set train.device="$DEVICE" --set train.precision=fp32 --set train.deterministic=true \
    --set train.fsdp="$strategy" --set train.data_streams="$DATA_STREAMS" --set "train.steps=${PARITY_STEPS:-50}" \
    --set train.batch_size=$batch --set train.log_every=1 --set train.ckpt_every=0 --set train.threads=1
}
step_parity() {
  local n=$1 rc=0 s
  make_data || return 1
  DATA_STREAMS=$n train 1 "$WORK/parity_ref_$n" no_shard || return 1
  rm -rf "$WORK/parity_ref_$n/checkpoints"
  for s in no_shard shard_grad_op full_shard; do
    DATA_STREAMS=$n train "$n" "$WORK/parity_${s}_$n" "$s" || { rc=1; continue; }
    rm -rf "$WORK/parity_${s}_$n/checkpoints"
    python3 - "$WORK/parity_ref_$n" "$WORK/parity_${s}_$n" "$s" "${PARITY_TOL:-1e-4}" <<'PY' >>"$jsonl" || rc=1
import json, os, sys
ref, run, strategy, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(d):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(os.path.join(d, "metrics.jsonl")))
            if "loss" in r and r.get("kind", "train") == "train"]
a, b = losses(ref), losses(run)
worst = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
n = int(os.path.basename(run).rsplit("_", 1)[1])
print(json.dumps({"step": "parity", "n": n, "strategy": strategy, "steps": len(b), "reference_steps": len(a),
                  "max_rel_diff": worst, "tolerance": tol, "final_loss": b[-1][1] if b else None,
                  "reference_final_loss": a[-1][1] if a else None, "pass": worst <= tol}))
sys.exit(0 if worst <= tol else 1)
PY
  done
  return $rc
}

batch_of() { case $1 in vlm-1b) echo "${BATCH_1B:-16}" ;; tiny) echo 2 ;; *) echo "${BATCH_222M:-32}" ;; esac; }
step_scaling() {
  local n=$1 rc=0 p b base common
  for p in $PRESETS; do
    b=$(batch_of "$p")
    common=(--preset "$p" --batch "$b" --steps "${BENCH_STEPS:-20}" --warmup 3)
    [ "$DEVICE" = cpu ] && common+=(--text-tokens 16 --device cpu)
    base="$WORK/baseline_$p.json"
    if [ ! -s "$base" ]; then  # the one-device step of the same batch: no FSDP on a GPU, a world of one on the CPU
      if [ "$DEVICE" = cpu ]; then
        "$VLM" bench train "${common[@]}" --json "$base" || rc=1
      else
        "$VLM" bench train "${common[@]}" --profile-steps 1 --trace-steps 0 --json "$base" || rc=1
      fi
    fi
    local peer="$WORK/fsdp2_${p}_$n.jsonl" peer_args=()
    rm -f "$peer"
    if [ $torch_ok = 1 ]; then
      torchrun --standalone --nproc_per_node "$n" bench/peers/fsdp2_peer.py --presets "$p" --batch "$b" \
        --steps "${BENCH_STEPS:-20}" --warmup 3 --out "$peer" || rc=1
      [ -s "$peer" ] && record scaling "$n" "$peer" && peer_args=(--peer "$peer")
    fi
    [ -s "$base" ] && peer_args+=(--baseline-json "$base")
    launch "$n" "$VLM" bench train "${common[@]}" --fsdp full_shard --precision "$precision" "${peer_args[@]}" \
      --json "$WORK/train_${p}_$n.json" || rc=1
    [ -s "$WORK/train_${p}_$n.json" ] && record scaling "$n" "$WORK/train_${p}_$n.json"
  done
  return $rc
}

status=0
for n in $NS; do
  if [ "$DEVICE" = cuda ] && [ "$n" -gt "$gpus" ]; then say "N=$n: skipped ($gpus GPU(s))"; continue; fi
  for step in $STEPS; do
    if [ "$(elapsed)" -ge "$DEADLINE" ]; then
      say "$step N=$n: not started (deadline ${DEADLINE} s reached at $(elapsed) s)"
      continue
    fi
    s0=$(date +%s)
    "step_$step" "$n" >"$OUT/logs/${step}_$n.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    say "$step N=$n: exit $rc in $(($(date +%s) - s0)) s"
    grep -E "ours / peer|ours/peer|weak scaling|FSDP memory|fsdp2_peer|error|Error|FAIL|not " \
      "$OUT/logs/${step}_$n.log" | tail -12 | sed "s/^/  $step $n| /" | tee -a "$session"
  done
done
say "multi_gpu: done in $(elapsed) s, status $status"
exit $status
