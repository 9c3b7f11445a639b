#!/usr/bin/env bash
# dev/gpu/ab_summary.py: medians per side and row, new/old (old/new for step times), and clear refusals of input with
# no rows, a row before any section, or a row only one side ran.
set -uo pipefail
tool=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
attn() { echo "d=128 causal=1 s= $1 b= 8 h=16 [hopper]  fwd $2  bwd $3  fwd+bwd $4 TFLOP/s  (its halves 1.0 / 2.0)"; }
{
  echo "== round 1, old: /tmp/b/bench_attention"
  attn 2048 400.0 300.0 320.0
  echo "some other line"
  echo "== round 1, new: /tmp/b/bench_attention VLM_FLASH_CAUSAL_WIDE=1"
  attn 2048 440.0 300.0 330.0
  echo "== round 2, old: /tmp/b/bench_attention"
  attn 2048 410.0 310.0 330.0
  echo "vlm.cpp bf16                   1400.0     45.00     340.0   34.4%     15.80"
  echo "== round 2, new: /tmp/b/bench_attention VLM_FLASH_CAUSAL_WIDE=1"
  attn 2048 450.0 290.0 340.0
  echo "vlm.cpp bf16                   1500.0     42.00     360.0   36.4%     15.80"
  echo "== round 3, old: x"
  attn 2048 420.0 320.0 340.0
  echo "vlm.cpp bf16                   1410.0     44.00     340.0   34.4%     15.80"
} >"$dir/ab.txt"
out=$(python3 "$tool" "$dir/ab.txt") || fail "exit status $? on a valid log: $out"
echo "$out" | grep -Eq "^d=128 causal=1 s=2048 +fwd +410\.0 +445\.0 +1\.085x  3/2$" || fail "fwd medians: $out"
echo "$out" | grep -Eq "^d=128 causal=1 s=2048 +bwd +310\.0 +295\.0 +0\.952x  3/2$" || fail "bwd medians: $out"
echo "$out" | grep -Eq "^train bf16 +samples/s +1405\.0 +1500\.0 +1\.068x  2/1$" || fail "train samples/s: $out"
echo "$out" | grep -Eq "^train bf16 +step ms +44\.5 +42\.0 +1\.060x  2/1$" || fail "step ms as old/new: $out"
out=$(python3 "$tool" <"$dir/ab.txt") || fail "stdin: exit status $?"

# Variants: each new[...] label against the same old side, on its own line.
{
  echo "== round 1, old: x"
  echo "vlm.cpp bf16                   1400.0     45.00     340.0   34.4%     15.80"
  echo "== round 1, new: x"
  echo "vlm.cpp bf16                   1450.0     44.00     340.0   34.4%     15.80"
  echo "== round 1, new[VLM_FLASH_DYNAMIC=1]: x VLM_FLASH_DYNAMIC=1"
  echo "vlm.cpp bf16                   1470.0     43.00     340.0   34.4%     15.80"
  echo "== round 2, old: x"
  echo "vlm.cpp bf16                   1410.0     45.00     340.0   34.4%     15.80"
  echo "== round 2, new[VLM_FLASH_DYNAMIC=1]: x VLM_FLASH_DYNAMIC=1"
  echo "vlm.cpp bf16                   1490.0     43.00     340.0   34.4%     15.80"
} >"$dir/variants.txt"
out=$(python3 "$tool" "$dir/variants.txt") || fail "variants: exit status $?: $out"
echo "$out" | grep -Eq "^train bf16 +samples/s +1405\.0 +1450\.0 +1\.032x  2/1$" || fail "variants, new: $out"
echo "$out" | grep -Eq "^train bf16 \[VLM_FLASH_DYNAMIC=1\] +samples/s +1405\.0 +1480\.0 +1\.053x  2/2$" || fail "variant: $out"

printf 'nothing here\n' >"$dir/none.txt"
python3 "$tool" "$dir/none.txt" 2>"$dir/err" && fail "no rows accepted"
grep -q "no benchmark rows" "$dir/err" || fail "no-rows message: $(cat "$dir/err")"
attn 512 1 2 3 >"$dir/nosection.txt"
python3 "$tool" "$dir/nosection.txt" 2>"$dir/err" && fail "a row outside any section accepted"
grep -q "line 1: a benchmark row before any" "$dir/err" || fail "section message: $(cat "$dir/err")"
{ echo "== round 1, old: x"; attn 512 1 2 3; } >"$dir/oneside.txt"
out=$(python3 "$tool" "$dir/oneside.txt") && fail "one side accepted: $out"
echo "$out" | grep -q "only the old side ran" || fail "one-side message: $out"
python3 "$tool" "$dir/missing.txt" 2>"$dir/err" && fail "missing file accepted"
grep -q "ab_summary: " "$dir/err" || fail "missing-file message"
echo "ab_summary: all checks passed"
