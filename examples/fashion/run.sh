#!/usr/bin/env bash
# Fashion-MNIST as a vision-language task, end to end on the CPU: install Debian's dataset-fashion-mnist (if
# missing), convert its IDX files to PNGs + JSONL (idx_to_jsonl.py), build webdataset shards with `vlm data build`,
# train a BPE tokenizer on them, train examples/fashion/fashion.toml (VQA "What item of clothing is this?" and
# "Is this a ...?" plus captioning), evaluate on the held-out t10k split and print where the results are.
#
#   examples/fashion/run.sh                 # the full example (60k training images, 300 steps of 32; the first
#                                           # 2,000 t10k images asked, 1,000 for yes/no): ~6 min on 2 cores
#   examples/fashion/run.sh --smoke         # CI: 512 training images, 10 steps, 16 held-out images
#   examples/fashion/run.sh -- --set train.steps=500   # arguments after -- go to `vlm train`
#
# Options: --vlm PATH (default build/apps/vlm/vlm, built with the cpu preset if missing), --data DIR (default
# data/fashion, data/fashion-smoke with --smoke), --run DIR (default runs/fashion, runs/fashion-smoke).
# FASHION_IDX_DIR=DIR reads the four *-ubyte.gz files from DIR instead of the Debian package.
# Converted images, JSONL, shards and the tokenizer are reused by later runs; the run directory is replaced.
# Exit status 77 (ctest's skip) with --smoke when the dataset is missing and cannot be installed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/examples/fashion"
cd "$root"

smoke=0 vlm="" data="" run=""
train_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --vlm) vlm="$2"; shift ;;
    --data) data="$2"; shift ;;
    --run) run="$2"; shift ;;
    --) shift; train_args=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$smoke" = 1 ]; then
  data="${data:-data/fashion-smoke}" run="${run:-runs/fashion-smoke}"
  train_limit=512 test_limit=64
else
  data="${data:-data/fashion}" run="${run:-runs/fashion}"
  train_limit=0 test_limit=0
fi
start=$(date +%s)
say() { echo "[fashion $(( $(date +%s) - start ))s] $*"; }

# 1. The dataset: Debian's dataset-fashion-mnist (MIT licensed, 30 MB download).
idx="${FASHION_IDX_DIR:-/usr/share/datasets/fashion-mnist}"
have_idx() {
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [ -f "$idx/$f.gz" ] || return 1
  done
}
if ! have_idx && [ -z "${FASHION_IDX_DIR:-}" ]; then
  say "installing dataset-fashion-mnist (Debian package) for $idx"
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && { [ "$smoke" = 0 ] || sudo -n true 2>/dev/null; }; then
    SUDO="sudo"  # the smoke test never waits for a password
  fi
  export DEBIAN_FRONTEND=noninteractive
  if { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; } && command -v apt-get >/dev/null; then
    $SUDO apt-get install -y -qq --no-install-recommends dataset-fashion-mnist >/dev/null 2>&1 ||
      { $SUDO apt-get update -qq >/dev/null 2>&1 &&
        $SUDO apt-get install -y -qq --no-install-recommends dataset-fashion-mnist >/dev/null 2>&1; } || true
  fi
fi
if ! have_idx; then
  if [ -n "${FASHION_IDX_DIR:-}" ]; then
    msg="FASHION_IDX_DIR=$idx lacks one of the four Fashion-MNIST *-ubyte.gz files"
  else
    msg="'apt-get install dataset-fashion-mnist' failed (it needs root or sudo, and apt sources); or set"
    msg+=" FASHION_IDX_DIR to a folder with the four Fashion-MNIST *-ubyte.gz files"
  fi
  if [ "$smoke" = 1 ]; then echo "SKIP: $msg" >&2; exit 77; fi
  echo "error: $msg" >&2
  exit 1
fi

# 2. The vlm binary.
if [ -z "$vlm" ]; then
  vlm=build/apps/vlm/vlm
  if [ ! -x "$vlm" ]; then
    say "building vlm (cmake preset cpu; scripts/install_deps.sh installs the build dependencies)"
    cmake --preset cpu >/dev/null
    cmake --build build --target vlm -j "$(nproc)"
  fi
fi
[ -x "$vlm" ] || { echo "error: $vlm is not an executable" >&2; exit 1; }

# 3. IDX -> PNG + JSONL -> shards (each step skipped when its output is there from an earlier run).
mkdir -p "$data"
for split in train t10k; do
  limit=$train_limit; [ "$split" = t10k ] && limit=$test_limit
  marker="$data/.converted-$split-$limit"
  if [ ! -f "$marker" ]; then
    say "converting $split: IDX -> PNG + JSONL in $data"
    rm -f "$data"/.converted-"$split"-* "$data/shards/.built-$split"*
    [ "$split" = train ] && rm -f "$data/tokenizer.json"
    python3 "$here/idx_to_jsonl.py" --idx-dir "$idx" --split "$split" --out "$data" --limit "$limit" >/dev/null
    touch "$marker"
  fi
done
for set in train t10k t10k-yesno; do
  if [ ! -f "$data/shards/.built-$set" ]; then
    say "vlm data build: $data/$set.jsonl -> $data/shards/$set"
    rm -rf "${data:?}/shards/$set"
    "$vlm" data build --from "$data/$set.jsonl" --out "$data/shards/$set" --samples-per-shard 10000 \
      --threads 1 >"$data/shards-$set.json"
    touch "$data/shards/.built-$set"
  fi
done
if [ ! -f "$data/tokenizer.json" ]; then
  say "training the tokenizer on the training shards' text"
  "$vlm" data tokenizer-train --shards "$data/shards/train" --out "$data/tokenizer.json.tmp" --vocab-size 384 \
    --max-samples 5000 --template plain
  mv "$data/tokenizer.json.tmp" "$data/tokenizer.json"
fi

# 4. Train (the final eval answers the held-out t10k clothing question and captions), then the yes/no question.
sets=(--set "data.train_shards=$data/shards/train" --set "data.val_shards=$data/shards/t10k"
      --set "data.tokenizer=$data/tokenizer.json")
if [ "$smoke" = 1 ]; then
  sets+=(--set train.steps=10 --set train.batch_size=16 --set train.warmup_steps=2 --set train.log_every=5
         --set train.threads=1 --set eval.samples=16 --set data.shuffle_window=0)
fi
rm -rf "$run"
say "training (examples/fashion/fashion.toml -> $run)"
"$vlm" train --config "$here/fashion.toml" --run-dir "$run" "${sets[@]}" "${train_args[@]}"
yesno_samples=1000; [ "$smoke" = 1 ] && yesno_samples=16
say "evaluating the yes/no question on the first $yesno_samples held-out images"
"$vlm" eval --run-dir "$run" --task vqa --set "data.val_shards=$data/shards/t10k-yesno" --samples "$yesno_samples" \
  --out "$run/eval/yesno.json" >/dev/null

say "done. Results in $run:"
echo "  config.toml          the resolved configuration"
echo "  metrics.jsonl        loss, lr, grad norm, throughput per step"
echo "  eval/final.json      held-out (t10k) 'What item of clothing is this?' accuracy per class, caption CIDEr-D, examples"
echo "  eval/yesno.json      held-out 'Is this a ...?' accuracy"
echo "  checkpoints/         model.safetensors (Hugging Face names), optimizer state, loader position"
echo "  data: $data (PNG + JSONL, shards/, tokenizer.json)"
python3 - "$run/eval/final.json" "$run/eval/yesno.json" <<'PY'
import json, sys
r, y = (json.load(open(p)) for p in sys.argv[1:3])
print(f"  held-out clothing question: {100 * r['vqa']['accuracy']:.2f}% of {r['vqa']['questions']} t10k images; "
      f"caption CIDEr-D {r['caption']['cider_d']:.3f}, exact match {100 * r['caption']['exact_match']:.2f}%")
for name, b in sorted(r["vqa"].get("by_class", {}).items()):
    print(f"    {name:12s} {100 * b['accuracy']:5.1f}% ({b['count']})")
print(f"  held-out yes/no question:   {100 * y['vqa']['accuracy']:.2f}% of {y['vqa']['questions']} t10k images")
if not (r["vqa"]["questions"] and r["caption"]["captions"] and y["vqa"]["questions"]):
    sys.exit("error: an evaluation asked no question")
PY
