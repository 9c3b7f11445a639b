#!/usr/bin/env bash
# `vlm serve` on one GPU under load, from the repo root: a nanoVLM-222M-shaped run (model.preset = nanovlm-222m,
# random init, one bf16 training step on synthetic shapes so that it is a run directory with a tokenizer and a
# checkpoint) is served with --device cuda, then bench/serve/load.py sends streamed chat requests with a 64 px image
# (ignore_eos, MAX_TOKENS each) at each concurrency: two rounds, the first warms cuBLASLt's per-shape choice, the
# second is reported. Prints one line per concurrency (requests/s, tokens/s, TTFT and latency p50/p99, server RSS)
# and writes them to $OUT/serve_bench.jsonl; the server must stop cleanly on SIGTERM.
# The CUDA vlm binary comes packed from the build machine (dev/gpu/gpu_pack.sh .carry/serve build-cuda/apps/vlm/vlm).
# Environment: SERVE_BIN (default .carry/serve), OUT (default /tmp/serve_bench), CONCURRENCY (default "1 8 32 64"),
# ROUND_SECONDS (default 20), MAX_TOKENS (default 128), KV_MEMORY (default 16G), DEVICE (default cuda), RUN (serve
# this run directory instead of making one; with DEVICE=cpu it smoke-tests the script on a small run).
set -uo pipefail
BIN=${SERVE_BIN:-.carry/serve}
OUT=${OUT:-/tmp/serve_bench}
CONCURRENCY=${CONCURRENCY:-1 8 32 64}
ROUND_SECONDS=${ROUND_SECONDS:-20}
MAX_TOKENS=${MAX_TOKENS:-128}
KV_MEMORY=${KV_MEMORY:-16G}
DEVICE=${DEVICE:-cuda}
# Only vlm gets the pack's libraries: its libcurl from the build machine breaks the system's curl.
vlm_env=(env "LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}")
repo=$(pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
vlm_bin="$BIN/vlm"
[ -x "$vlm_bin" ] || { echo "serve_bench: $vlm_bin missing (dev/gpu/gpu_pack.sh $BIN build-cuda/apps/vlm/vlm)"; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/gpu: /'

"${vlm_env[@]}" "$vlm_bin" data synth shapes --out "$OUT/shards" --samples 256 --seed 1 --image-size 64 --shard-size 256 >/dev/null || exit 1
python3 - "$OUT" <<'PY' || exit 1
import glob, sys, tarfile
out = sys.argv[1]
tar = tarfile.open(sorted(glob.glob(f"{out}/shards/*.tar"))[0])
member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
open(f"{out}/image.jpg", "wb").write(tar.extractfile(member).read())
PY
run=${RUN:-}
if [ -z "$run" ]; then
  run="$OUT/run"
  rm -rf "$run"
  "${vlm_env[@]}" "$vlm_bin" data tokenizer-train --shards "$OUT/shards" --out "$OUT/tok.json" --vocab-size 300 >/dev/null || exit 1
  echo "making a nanoVLM-222M-shaped run (random init, one bf16 step)"
  "${vlm_env[@]}" "$vlm_bin" train --config configs/shapes-tiny.toml --run-dir "$run" --quiet --set model.preset=nanovlm-222m \
    --set data.train_shards="$OUT/shards" --set data.tokenizer="$OUT/tok.json" --set data.val_shards= \
    --set train.device=cuda --set train.precision=bf16 --set train.steps=1 --set train.batch_size=2 \
    --set train.warmup_steps=0 --set train.ckpt_every=0 >"$OUT/train.log" 2>&1 ||
    { tail -20 "$OUT/train.log"; exit 1; }
fi

max_c=0
for c in $CONCURRENCY; do [ "$c" -gt "$max_c" ] && max_c=$c; done
"${vlm_env[@]}" "$vlm_bin" serve "$run" --device "$DEVICE" --port 0 --served-model-name nanovlm-222m --max-queue $((max_c * 2)) \
  --max-num-seqs $((max_c > 256 ? max_c : 256)) --kv-memory "$KV_MEMORY" --max-tokens 1024 >"$OUT/serve.log" 2>&1 &
server=$!
trap 'kill -9 $server 2>/dev/null || true' EXIT
port=""
for _ in $(seq 600); do
  port=$(sed -n 's|.*on http://127.0.0.1:\([0-9]*\).*|\1|p' "$OUT/serve.log")
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$OUT/serve.log"; echo "serve_bench: the server died"; exit 1; }
  sleep 0.2
done
[ -n "$port" ] || { cat "$OUT/serve.log"; echo "serve_bench: the server did not start"; exit 1; }
head -3 "$OUT/serve.log"

status=0
: >"$OUT/serve_bench.jsonl"
for c in $CONCURRENCY; do
  python3 bench/serve/load.py --url "http://127.0.0.1:$port" --model nanovlm-222m --image "$OUT/image.jpg" \
    --clients "$c" --seconds "$ROUND_SECONDS" --rounds 2 --max-tokens "$MAX_TOKENS" --pid $server \
    --json "$OUT/c$c.json" >"$OUT/load_c$c.log" 2>&1 || status=1
  python3 - "$OUT/c$c.json" "$DEVICE" "$MAX_TOKENS" "$OUT/serve_bench.jsonl" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))[-1]  # the second round: cuBLASLt's choices are made
r.update(device=sys.argv[2], max_tokens=int(sys.argv[3]), model="nanovlm-222m")
with open(sys.argv[4], "a") as f:
    f.write(json.dumps(r) + "\n")
print(f"concurrency {r['clients']:>3}: {r['requests_per_s']:7.2f} req/s {r['tokens_per_s']:8.0f} tokens/s  "
      f"TTFT p50 {r['ttft_p50_ms']:7.1f} ms p99 {r['ttft_p99_ms']:7.1f} ms  latency p50 {r['latency_p50_ms']:7.1f} ms "
      f"p99 {r['latency_p99_ms']:7.1f} ms  errors {r['errors']}  RSS {r['rss_mb']:.0f} MiB")
PY
done
curl -s "http://127.0.0.1:$port/metrics" >"$OUT/metrics.txt"
grep -E "^vlm_(kv_blocks|prefix_cache_hit_rate|image_cache_hit_rate|preemptions_total)" "$OUT/metrics.txt"
kill -TERM $server
code=0; wait $server || code=$?
trap - EXIT
[ $code -eq 0 ] || { echo "serve_bench: the server exited with $code"; status=1; }
echo "figures: $OUT/serve_bench.jsonl"
exit $status
