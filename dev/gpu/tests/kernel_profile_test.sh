#!/usr/bin/env bash
# dev/gpu/kernel_profile.py: the last complete step between step markers, units, categories, the kernel table, and
# clear refusals of malformed CSV (missing column, bad number, unknown unit, no rows).
set -uo pipefail
prof=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
header='"ID","Kernel Name","Grid Size","Block Size","Metric Name","Metric Unit","Metric Value"'
row() { echo "\"$1\",\"$2\",\"(1, 1, 1)\",\"(256, 1, 1)\",\"gpu__time_duration.sum\",\"$3\",\"$4\""; }
{
  echo "==PROF== Connected to process"
  echo "$header"
  row 0 "void ops::image_to_patches_kernel<bf16>(int)" usecond 5
  row 1 "nvjet_sm90_tst_128x160(int)" usecond 100
  row 2 "void ops::image_to_patches_kernel<bf16>(int)" nsecond "2,000"
  row 3 "nvjet_sm90_tst_128x160(int)" usecond 40
  row 4 "nvjet_sm90_tst_128x160(int)" msecond 0.02
  row 5 "void flash::flash_fwd_sm90_kernel<64, true>(CUtensorMap_st, FlashFwdParams)" usecond 30
  row 6 "void ops::norm_backward_warp_kernel<bf16, 3, 0, 1>(float*)" usecond 8
  row 7 "void ops::image_to_patches_kernel<bf16>(int)" usecond 7
  row 8 "nvjet_sm90_tst_128x160(int)" usecond 999
} >"$dir/ok.csv"
out=$(python3 "$prof" "$dir/ok.csv" --top 3) || fail "exit status $? on a valid file"
echo "$out" | grep -q "^step 2 of 3 marked (launches 2..6): 5 kernels, 0.10 ms" || fail "step selection: $out"
echo "$out" | grep -Eq "^gemm +0\.060 +60\.0%" || fail "gemm category (40 us + 0.02 ms): $out"
echo "$out" | grep -Eq "^attention forward +0\.030 +30\.0%" || fail "attention category: $out"
echo "$out" | grep -Eq "^norm backward +0\.008 +8\.0%" || fail "norm category: $out"
echo "$out" | grep -Eq "^ +0\.060 +2 +30\.0  nvjet_sm90_tst_128x160 \(1, 1, 1\)$" || fail "kernel table: $out"
echo "$out" | grep -q "flash_fwd_sm90_kernel<64, true> (1, 1, 1)" || fail "short names: $out"
[ "$(echo "$out" | grep -c 'us/call' )" = 1 ] || fail "one table header"
[ "$(echo "$out" | sed -n '/us\/call/,$p' | wc -l)" = 4 ] || fail "--top 3 lists three kernels: $out"

out=$(python3 "$prof" "$dir/ok.csv" --marker no_such_kernel) || fail "exit status $? without markers"
echo "$out" | grep -q "^all 9 launches (fewer than two 'no_such_kernel' launches" || fail "no markers: $out"

out=$(python3 "$prof" "$dir/ok.csv" --medians) || fail "exit status $? with --medians"
echo "$out" | sed -n 2p | grep -Eq "^ +5\.0 +3  image_to_patches_kernel<bf16>$" || fail "first launched, median of 5, 2, 7 us: $out"
echo "$out" | grep -Eq "^ +70\.0 +4  nvjet_sm90_tst_128x160$" || fail "median of 100, 40, 20, 999 us: $out"
out=$(python3 "$prof" "$dir/ok.csv" --medians --min-us 6) || fail "exit status $? with --min-us"
echo "$out" | grep -q image_to_patches && fail "--min-us 6 leaves out a 5 us median: $out"
echo "$out" | grep -Eq "^ +8\.0 +1  norm_backward_warp_kernel<bf16, 3, 0, 1>$" || fail "--min-us 6 keeps 8 us: $out"

expect_refusal() {  # file, text the message must contain
  msg=$(python3 "$prof" "$1" 2>&1) && fail "accepted $1"
  echo "$msg" | grep -q "$2" || fail "message for $1 lacks '$2': $msg"
}
echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"' >"$dir/no_grid.csv"
expect_refusal "$dir/no_grid.csv" "header lacks Grid Size"
{ echo "$header"; row 0 k usecond abc; } >"$dir/bad_value.csv"
expect_refusal "$dir/bad_value.csv" "row 2: duration 'abc' is not a number"
{ echo "$header"; row 0 k furlong 3; } >"$dir/bad_unit.csv"
expect_refusal "$dir/bad_unit.csv" "unknown time unit 'furlong'"
echo "==PROF== nothing" >"$dir/empty.csv"
expect_refusal "$dir/empty.csv" "has no CSV rows"
expect_refusal "$dir/missing.csv" "cannot read"
echo "kernel_profile tests passed"
