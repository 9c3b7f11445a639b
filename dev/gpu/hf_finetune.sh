#!/usr/bin/env bash
# The GPU-machine fine-tuning check of imported checkpoints, from the repo root: full-size random SmolVLM-256M
# (Idefics3, bf16) and nanoVLM-222M (nanoVLM's layout) checkpoints from dev/fixtures/make_hf_fixtures.py --big go in
# through train.init_from and train a few steps in bf16 on synthetic shapes; the loss must fall (mean of the last
# three steps below 0.9 x the mean of the first three). Then SmolVLM-256M again with its image tiling: the folder gets
# SmolVLM's own tokenizer, chat template and preprocessor_config.json (tests/data/tokenizer/fixtures/hf/smolvlm), so
# the loader cuts every image into tiles plus the global image (data.longest_edge = 1024: 2 x 2 tiles of 512 px + 1,
# 320 image tokens per sample); its log (train_smolvlm-256m-tiled.log) shows the tiling line and the memory report.
# The CUDA vlm binary comes packed from the build machine (dev/gpu/gpu_pack.sh .carry/hf build-cuda/apps/vlm/vlm).
# Environment: HF_BIN (default .carry/hf), OUT (default /tmp/hf_finetune), STEPS (default 30).
set -uo pipefail
BIN=${HF_BIN:-.carry/hf}
OUT=${OUT:-/tmp/hf_finetune}
STEPS=${STEPS:-30}
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
status=0
python3 dev/fixtures/make_hf_fixtures.py --big "$OUT/big" || exit 1
"$BIN/vlm" data synth shapes --out "$OUT/train" --samples 512 --seed 1 --image-size 64 --shard-size 128 || exit 1
"$BIN/vlm" data tokenizer-train --shards "$OUT/train" --out "$OUT/tok.json" --vocab-size 300 || exit 1
tiled="$OUT/big/smolvlm-256m-tiled"
rm -rf "$tiled" && cp -r "$OUT/big/smolvlm-256m" "$tiled" || exit 1
fx=tests/data/tokenizer/fixtures/hf/smolvlm
cp "$fx/chat_template.json" "$fx/tokenizer_config.json" "$fx/preprocessor_config.json" "$tiled/" || exit 1
python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$fx/tokenizer.json.xz" \
  > "$tiled/tokenizer.json" || exit 1
for name in smolvlm-256m nanovlm-222m smolvlm-256m-tiled; do
  run="$OUT/run_$name"
  rm -rf "$run"
  extra=()
  tok="$OUT/tok.json"
  if [ "$name" = smolvlm-256m-tiled ]; then
    tok="$OUT/big/$name"
    extra=(--set data.chat_template=hf --set data.task=caption --set data.longest_edge=1024)
  fi
  "$BIN/vlm" train --run-dir "$run" --quiet --set train.init_from="$OUT/big/$name" "${extra[@]}" \
    --set data.train_shards="$OUT/train" --set data.tokenizer="$tok" --set data.val_shards= \
    --set train.device=cuda --set train.precision=bf16 --set train.steps="$STEPS" --set train.batch_size=8 \
    --set train.grad_accum=1 --set train.lr=3e-4 --set train.warmup_steps=5 --set train.ckpt_every=0 \
    > "$OUT/train_$name.log" 2>&1 || { echo "$name: training failed (see $OUT/train_$name.log)"; tail -5 "$OUT/train_$name.log"; status=1; continue; }
  python3 - "$run/metrics.jsonl" "$name" <<'PY' || status=1
import json, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
ok = last < 0.9 * first
print(f"{sys.argv[2]}: {len(losses)} steps, loss {first:.4f} -> {last:.4f} {'falls' if ok else 'DOES NOT FALL'}")
sys.exit(0 if ok else 1)
PY
done
exit $status
