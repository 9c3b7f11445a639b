#!/usr/bin/env bash
# The demo, end to end on a CPU: install dependencies, build, make the embedded "shapes" dataset (train split and
# a separately seeded held-out split), train a BPE tokenizer on it, train the tiny VLM, evaluate on held-out
# questions and say where the results are. VLM_DEMO_TRAIN_SAMPLES: training samples to render (default 50000).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
say() { echo "[demo $(( $(date +%s) - start ))s] $*"; }

say "installing dependencies (if missing)"
scripts/install_deps.sh
say "building (CPU preset)"
scripts/build.sh cpu --target vlm
VLM=build/apps/vlm/vlm

data=data/shapes
train_samples="${VLM_DEMO_TRAIN_SAMPLES:-50000}"
if [ ! -f "$data/.done-$train_samples" ]; then
  say "rendering the shapes dataset: $train_samples training samples (seed 1), 1000 held-out (seed 2)"
  rm -rf "$data"
  "$VLM" data synth shapes --out "$data/train" --samples "$train_samples" --seed 1
  "$VLM" data synth shapes --out "$data/val" --samples 1000 --seed 2
  say "training the tokenizer"
  "$VLM" data tokenizer-train --shards "$data/train" --out "$data/tokenizer.json" --vocab-size 384 --max-samples 5000
  touch "$data/.done-$train_samples"
fi

run=runs/shapes-tiny
rm -rf "$run"
say "training (configs/shapes-tiny.toml -> $run)"
"$VLM" train --config configs/shapes-tiny.toml --run-dir "$run" "$@"

say "done. Results in $run:"
echo "  config.toml        the resolved configuration"
echo "  metrics.jsonl      loss, lr, grad norm, throughput, model TFLOP/s per step"
echo "  tb/                the same as TensorBoard event files, with eval samples and the config"
echo "                     (tensorboard --logdir $run), or one HTML page: $VLM report $run --out report.html"
echo "  eval/final.json    held-out VQA accuracy by question type, caption CIDEr-D / BLEU / ROUGE-L, examples"
echo "  checkpoints/       model.safetensors (Hugging Face names), optimizer state, loader position"
python3 - "$run/eval/final.json" <<'PY' 2>/dev/null || true
import json, sys
r = json.load(open(sys.argv[1]))
v, c = r["vqa"], r["caption"]
print(f"  held-out VQA accuracy: {100*v['accuracy']:.1f}% of {v['questions']} questions; "
      f"caption CIDEr-D {c['cider_d']:.3f}, exact match {100*c['exact_match']:.1f}%")
for t, b in sorted(v["by_type"].items()):
    print(f"    {t:9s} {100*b['accuracy']:5.1f}% ({b['count']} questions)")
PY
