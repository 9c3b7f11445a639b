#!/usr/bin/env bash
# Nsight Compute's full section set on one launch of a kernel, ours (bench_attention) and cuDNN's (through the SDPA
# peer) at the same shape, exported as CSV to be read off the GPU machine (the build machine has no ncu):
#   dev/gpu/gpu_ncu_full.sh "d causal seqlen" ...        e.g. "64 yes 4096" "128 no 2048"
# Environment: FLASH_BIN (bench_attention and lib/, default .carry/flash), OUT (default ./gpu_ncu_out), PASS (fwd or
# bwd, default fwd: which kernel of each side is profiled), SIDES (default "ours cudnn"), STEP_TIMEOUT (seconds per
# ncu run, default 240).
# Writes $OUT/raw.csv (one row per profiled kernel, every collected metric; the first column names side and shape),
# $OUT/sass_D_CAUSAL_S.csv (our kernel's SASS with per-instruction warp-state samples) and $OUT/summary.txt (a few
# headline metrics per kernel, also printed). Each run profiles the second launch of the kernel (the first is warm-up).
set -uo pipefail
BIN=${FLASH_BIN:-.carry/flash}
OUT=${OUT:-gpu_ncu_out}
PASS=${PASS:-fwd}
STEP_TIMEOUT=${STEP_TIMEOUT:-240}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
case $PASS in
  fwd) ours_k='regex:flash_fwd_sm90'; cudnn_k='regex:fprop' ;;
  bwd) ours_k='regex:flash_bwd_sm90'; cudnn_k='regex:bprop' ;;
  *) echo "gpu_ncu_full: PASS must be fwd or bwd, not '$PASS'" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "usage: $0 \"d causal seqlen\" ..." >&2; exit 2; }
status=0
: >"$OUT/summary.txt"
first_raw=1
for shape in "$@"; do
  read -r d causal seqlen <<<"$shape"
  args=(--head-dims "$d" --causal "$causal" --seqlens "$seqlen" --iters 1 --warmup 1)
  for side in ${SIDES:-ours cudnn}; do
    tag="${side}_${d}_${causal}_${seqlen}"
    if [ "$side" = ours ]; then
      kfilter=$ours_k
      cmd=("$BIN/bench_attention" "${args[@]}")
    else
      kfilter=$cudnn_k
      cmd=(python3 bench/peers/attention_sdpa.py --backends cudnn "${args[@]}")
    fi
    rep="/tmp/ncu_$tag"
    if ! timeout -k 5 "$STEP_TIMEOUT" ncu --set full --import-source no --clock-control none -k "$kfilter" \
        --launch-skip 1 --launch-count 1 -f -o "$rep" "${cmd[@]}" >"/tmp/ncu_$tag.log" 2>&1; then
      echo "$tag: ncu failed" | tee -a "$OUT/summary.txt"
      tail -5 "/tmp/ncu_$tag.log"
      status=1
      continue
    fi
    # raw page: a header row, a units row, then one row per kernel; prefix each with the tag.
    ncu --import "$rep.ncu-rep" --page raw --csv >"/tmp/raw_$tag.csv" 2>/dev/null || status=1
    if [ $first_raw = 1 ]; then
      sed -n '1,2{s/^/"tag",/;p}' "/tmp/raw_$tag.csv" >"$OUT/raw.csv"
      first_raw=0
    fi
    sed -n "3,\${s/^/\"$tag\",/;p}" "/tmp/raw_$tag.csv" >>"$OUT/raw.csv"
    if [ "$side" = ours ]; then
      ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$OUT/sass_${d}_${causal}_${seqlen}.csv" \
        2>/dev/null || echo "$tag: no source page" | tee -a "$OUT/summary.txt"
    fi
    {
      echo "== $tag"
      headline="^  [a-z_0-9]+.*\\(|Duration|Registers Per|Grid Size|Block Size|Dynamic Shared|Achieved Occupancy"
      headline+="|Compute \\(SM\\) Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued"
      ncu --import "$rep.ncu-rep" --page details 2>/dev/null | grep -E "$headline|Executed Ipc A" | head -20
    } | tee -a "$OUT/summary.txt"
  done
done
exit $status
