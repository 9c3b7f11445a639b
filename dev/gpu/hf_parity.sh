#!/usr/bin/env bash
# The GPU-machine checks of Hugging Face parity, from the repo root:
#   1. fixtures: dev/fixtures/make_hf_fixtures.py --out $FIXTURES (skipped when $FIXTURES/manifest.json exists)
#   2. test_hf_parity (CPU, fp32) and test_hf_parity_gpu (fp32 and bf16 on the GPU) on those fixtures
#   3. export -> transformers: each fixture's model goes through `vlm convert --to hf`, transformers loads the result
#      (no missing or unexpected tensors) and its logits match the fixture's reference (1e-4 relative)
# Binaries come packed from the build machine (dev/gpu/gpu_pack.sh .carry/hf build-cuda/apps/vlm/vlm
# build-cuda/tests/model/test_hf_parity build-cuda/tests/model/test_hf_parity_gpu), carried as .carry/hf.
# Environment: HF_BIN (default .carry/hf), FIXTURES (default tests/model/fixtures/hf), OUT (default /tmp/hf_parity).
# Exit status: non-zero when any check fails; logs under $OUT.
set -uo pipefail
BIN=${HF_BIN:-.carry/hf}
FIXTURES=${FIXTURES:-tests/model/fixtures/hf}
OUT=${OUT:-/tmp/hf_parity}
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
status=0

if [ ! -f "$FIXTURES/manifest.json" ]; then
  python3 dev/fixtures/make_hf_fixtures.py --out "$FIXTURES" 2>&1 | tee "$OUT/fixtures.log" || status=1
fi
for t in test_hf_parity test_hf_parity_gpu; do
  if [ -x "$BIN/$t" ]; then
    "$BIN/$t" 2>&1 | tee "$OUT/$t.log" || status=1
  else
    echo "$BIN/$t is missing: skipped" | tee -a "$OUT/summary.log"
  fi
done
if [ -x "$BIN/vlm" ]; then
  for family in idefics3 llama qwen2 siglip nanovlm; do
    extra=()
    [ "$family" = nanovlm ] && extra=(--image-token-id 500)  # nanoVLM keeps it in its tokenizer, not config.json
    "$BIN/vlm" convert "$FIXTURES/$family/model" --to hf --out "$OUT/export/$family" "${extra[@]}" \
      > "$OUT/convert_$family.log" 2>&1 || { echo "convert $family failed" | tee -a "$OUT/summary.log"; status=1; continue; }
    python3 dev/fixtures/make_hf_fixtures.py --check-export "$OUT/export/$family" --fixture "$FIXTURES/$family" \
      2>&1 | tee -a "$OUT/summary.log" || status=1
  done
fi
echo "hf_parity: exit $status" | tee -a "$OUT/summary.log"
exit $status
