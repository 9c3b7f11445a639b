#!/usr/bin/env bash
# `vlm serve` end to end (ctest serve.e2e, label cpu): trains a tiny 16 px run through the CLI (seconds), serves it
# on a free loopback port with an API key, drives it with the official OpenAI Node client (openai_client.mjs; its beam
# search request must answer what `vlm generate` with the same beam flags answers), runs
# the bounded load test (bench/serve/load.py: 4 clients, 3 rounds, no errors, flat server memory), then stops the
# server with SIGTERM while a stream is in flight: the stream completes and the server exits 0; checks the per-request
# timeout on a second server; and smoke-tests dev/gpu/serve_bench.sh on the CPU with the same run.
# usage: serve_e2e.sh VLM_BINARY WORK_DIR NPM_DIR     (the openai package is installed into NPM_DIR once)
# Exit 77 (skipped) when npm cannot install the package (no registry).
set -euo pipefail
vlm=$(realpath "$1"); work=$2; mkdir -p "$3"; npm_dir=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
say() { echo "[serve-e2e] $*"; }
rm -rf "$work"; mkdir -p "$work"; work=$(realpath "$work"); cd "$work"

if [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
  say "installing the openai npm package into $npm_dir"
  mkdir -p "$npm_dir"
  if ! npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error openai@4.104.0 >npm.log 2>&1; then
    cat npm.log; say "SKIP: npm could not install openai"; exit 77
  fi
fi

say "training a tiny run"
"$vlm" data synth shapes --out shards --samples 200 --image-size 16 --shard-size 200 --seed 1 >/dev/null
"$vlm" data tokenizer-train --shards shards --out tokenizer.json --vocab-size 300 >/dev/null
cat > run.toml <<TOML
[model]
vision.image_size = 16
vision.patch_size = 4
vision.hidden = 16
vision.layers = 1
vision.heads = 2
vision.mlp_hidden = 32
text.vocab_size = 300
text.hidden = 32
text.layers = 1
text.heads = 4
text.kv_heads = 2
text.intermediate = 48
text.max_seq_len = 256
[data]
train_shards = "$PWD/shards"
tokenizer = "$PWD/tokenizer.json"
task = "mixed"
[train]
steps = 2
batch_size = 4
ckpt_every = 2
warmup_steps = 1
TOML
"$vlm" train --config run.toml --run-dir run --quiet >train.log 2>&1 || { cat train.log; exit 1; }

say "test images"
py=/usr/bin/python3  # Debian's, with python3-pil (install_deps.sh); a pyenv python3 on PATH may lack PIL
[ -x $py ] || py=python3
$py - <<'PY'
import glob, io, tarfile
from PIL import Image
tar = tarfile.open(sorted(glob.glob("shards/*.tar"))[0])
jpg = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
data = tar.extractfile(jpg).read()
open("small.jpg", "wb").write(data)
im = Image.open(io.BytesIO(data)).convert("RGB")
im.save("small.png"); im.save("small.webp")
im.resize((64, 64)).save("big.png")  # 4096 pixels: over the server's data.max_pixels = 1000
PY

key=e2e-$RANDOM$RANDOM
echo "$key" > key.txt
max_queue=4
# start_server ARGS...: starts `vlm serve run ARGS` on a free port; sets server (pid) and base (URL).
start_server() {
  "$vlm" serve run --port 0 "$@" >serve.log 2>&1 &
  server=$!
  trap 'kill -9 $server 2>/dev/null || true' EXIT
  local port=""
  for _ in $(seq 200); do
    port=$(sed -n 's|.*on http://127.0.0.1:\([0-9]*\).*|\1|p' serve.log)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 $server 2>/dev/null || { cat serve.log; say "the server died"; exit 1; }
    sleep 0.1
  done
  [ -n "$port" ] || { cat serve.log; say "the server did not start"; exit 1; }
  base=http://127.0.0.1:$port
}
start_server --api-key-file key.txt --served-model-name shapes-tiny --max-queue $max_queue \
  --max-body-bytes 2M --max-image-bytes 1M --set data.max_pixels=1000 --shutdown-timeout 20
say "serving on $base (pid $server)"

say "curl: chat with an image"
url="data:image/jpeg;base64,$(base64 -w0 small.jpg)"
curl -sf "$base/v1/chat/completions" -H "Authorization: Bearer $key" -H "Content-Type: application/json" \
  -d "{\"model\": \"shapes-tiny\", \"max_tokens\": 8, \"messages\": [{\"role\": \"user\", \"content\": [
       {\"type\": \"image_url\", \"image_url\": {\"url\": \"$url\"}}, {\"type\": \"text\", \"text\": \"what color is the square?\"}]}]}" \
  | $py -c 'import json,sys; r=json.load(sys.stdin); assert r["object"]=="chat.completion"; print("   ", r["choices"][0]["message"])'
status=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/models")
[ "$status" = 401 ] || { say "no key: got $status, want 401"; exit 1; }

say "vlm generate with beam flags: what the served beam request must answer"
echo '{"id": "beam", "prompt": "what color is the square?", "images": ["small.jpg"]}' > beam_request.jsonl
"$vlm" generate run --requests beam_request.jsonl --out beam_expected.jsonl --beam-width 4 --n 2 \
  --length-penalty 0.7 --max-tokens 8 --set data.max_pixels=1000 --quiet

say "the official OpenAI client"
OPENAI_MODULE="$npm_dir/node_modules/openai/index.mjs" BASE_URL=$base API_KEY=$key MODEL=shapes-tiny IMAGE_DIR=. \
  MAX_QUEUE=$max_queue BEAM_EXPECTED=beam_expected.jsonl node "$here/openai_client.mjs"

say "docs/serve.md: its metrics table is what /metrics lists, its flags table what --help lists"
curl -sf "$base/metrics" -H "Authorization: Bearer $key" >metrics.txt
"$vlm" serve --help >serve_help.txt 2>&1 || true
$py - "$repo/docs/serve.md" <<'PY'
import re, sys
doc = open(sys.argv[1]).read()
section = lambda title: doc.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
documented = set(re.findall(r"^\| `(vlm_[a-z_]+)", section("Metrics"), re.M))
served = set(re.findall(r"^# TYPE (vlm_[a-z_]+) ", open("metrics.txt").read(), re.M))
assert documented == served, f"only in docs/serve.md: {sorted(documented - served)}; only in /metrics: {sorted(served - documented)}"
flags_doc = set(re.findall(r"`(--[a-z-]+)", section("Flags")))
flags_help = set(re.findall(r"^  (--[a-z-]+)", open("serve_help.txt").read(), re.M))
assert flags_doc == flags_help, f"only in docs/serve.md: {sorted(flags_doc - flags_help)}; only in --help: {sorted(flags_help - flags_doc)}"
print(f"    {len(served)} metrics and {len(flags_help)} flags, documented and served alike")
PY

say "load: $max_queue clients, 3 rounds"
$py "$repo/bench/serve/load.py" --url "$base" --api-key "$key" --model shapes-tiny --image small.jpg \
  --clients $max_queue --seconds 3 --rounds 3 --max-tokens 16 --pid $server --max-rss-growth-mb 16

say "graceful stop: SIGTERM with a stream in flight"
curl -sN "$base/v1/chat/completions" -H "Authorization: Bearer $key" -H "Content-Type: application/json" \
  -d '{"model": "shapes-tiny", "max_tokens": 150, "ignore_eos": true, "stream": true, "messages": [{"role": "user", "content": "describe the image."}]}' \
  >inflight.txt &
client=$!
for _ in $(seq 100); do grep -q '"content"' inflight.txt 2>/dev/null && break; sleep 0.02; done
kill -TERM $server
wait $client
tail -c 200 inflight.txt | grep -q 'data: \[DONE\]' || { tail -c 400 inflight.txt; say "the in-flight stream did not finish"; exit 1; }
grep -q '"finish_reason":"length"' inflight.txt || { say "the in-flight stream was cut"; exit 1; }
code=0; wait $server || code=$?
trap - EXIT
[ "$code" = 0 ] || { cat serve.log; say "the server exited with $code"; exit 1; }
grep -q "stopped" serve.log || { cat serve.log; exit 1; }

say "per-request timeout: 504, and an error event in a stream"
start_server --request-timeout 0.01 --max-n 16
long='"max_tokens": 240, "ignore_eos": true, "n": 16, "messages": [{"role": "user", "content": "describe the image."}]'
status=$(curl -s -o timeout.json -w '%{http_code}' "$base/v1/chat/completions" -d "{$long}")
[ "$status" = 504 ] && grep -q request_timeout timeout.json || { cat timeout.json; say "timeout: got $status"; exit 1; }
curl -sN "$base/v1/chat/completions" -d "{$long, \"stream\": true}" >timeout_stream.txt
grep -q request_timeout timeout_stream.txt && tail -c 50 timeout_stream.txt | grep -q 'data: \[DONE\]' ||
  { tail -c 300 timeout_stream.txt; say "the timed-out stream has no error event"; exit 1; }
# blocks_used: the gauge, read whole before grep looks at it (with pipefail, `curl | grep -q` fails whenever grep
# exits before curl has written everything).
blocks_used() { local m; m=$(curl -s "$base/metrics"); sed -n 's/^vlm_kv_blocks_used //p' <<<"$m"; }
for _ in $(seq 100); do  # the gauges follow the engine loop's next pass
  [ "$(blocks_used)" = 0 ] && break
  sleep 0.05
done
[ "$(blocks_used)" = 0 ] || { say "blocks held after the timeouts: $(blocks_used)"; exit 1; }
kill -TERM $server
wait $server
trap - EXIT

say "dev/gpu/serve_bench.sh, smoke-tested on the CPU with this run"
(cd "$repo" && SERVE_BIN=$(dirname "$vlm") DEVICE=cpu RUN="$work/run" OUT="$work/serve_bench" CONCURRENCY=2 \
  ROUND_SECONDS=1 MAX_TOKENS=8 KV_MEMORY=32M bash dev/gpu/serve_bench.sh) >serve_bench.log 2>&1 ||
  { cat serve_bench.log; say "serve_bench.sh failed"; exit 1; }
grep -q "concurrency   2:" serve_bench.log && [ "$(wc -l <"$work/serve_bench/serve_bench.jsonl")" = 1 ] ||
  { cat serve_bench.log; say "serve_bench.sh printed no figures"; exit 1; }
say "passed"
