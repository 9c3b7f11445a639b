#!/usr/bin/env bash
# dev/gpu/gpu_session.sh with stub binaries (no GPU): a pack unpacked from its .tar.xz, the steps in order with their
# summaries collected and printed again after the last step, a failing test binary's log kept and the exit status 1,
# a passing step's logs dropped, steps past DEADLINE reported as not started, the A/B summarized per row, the
# interleaved benchmark skipped without the C library, the training step's switches A/B'd against its default, and
# the attention switches' A/B summarized, and a missing pack refused with 2.
set -uo pipefail
session=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Stubs: nvidia-smi on the PATH; the pack's tests (one passing, one failing) and bench_attention (one row per run: the
# A/B's three shapes x 2 rounds fall into one row of 6 runs a side). The pack gets a name of its own, as it unpacks
# into /tmp.
pack=gpu_session_test_pack_$$
mkdir -p "$dir/bin" "$dir/$pack/lib" "$dir/old"
printf '#!/usr/bin/env bash\necho "Stub GPU, 1980 MHz"\n' >"$dir/bin/nvidia-smi"
printf '#!/usr/bin/env bash\necho "[==========] 2 tests ran."\necho "[  PASSED  ] 2 tests."\n' >"$dir/$pack/test_good"
printf '#!/usr/bin/env bash\necho "[  FAILED  ] 1 test, listed below:"\nexit 1\n' >"$dir/$pack/test_bad"
for side in old "$pack"; do
  cat >"$dir/$side/bench_attention" <<SCRIPT
#!/usr/bin/env bash
[ "$side" = old ] && v=100.0 || v=110.0
echo "d= 64 causal=1 s=  177 b=64 h= 9 [hopper/hopper]  fwd  \$v  bwd   50.0  fwd+bwd   60.0 TFLOP/s  (its halves 1 / 2)"
SCRIPT
done
chmod +x "$dir"/bin/* "$dir/$pack"/* "$dir"/old/*
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'w:xz').add(sys.argv[2], arcname=sys.argv[3])" \
  "$dir/$pack.tar.xz" "$dir/$pack" "$pack"  # as dev/gpu/gpu_pack.sh packs (xz may be missing here)
rm -rf "${dir:?}/$pack"  # only the .tar.xz is left: the script must unpack it (into /tmp, as on the GPU machine)

out=$(PATH="$dir/bin:$PATH" NEW="$dir/$pack.tar.xz" OLD="$dir/old" OUT="$dir/out" bash "$session" gtests ab)
rc=$?
rm -rf "/tmp/${pack:?}"
[ $rc -eq 1 ] || fail "a failing test binary gave exit status $rc, not 1"
summary=$(sed -n '/^==== session summary/,$p' <<<"$out")
grep -q "^gpu: Stub GPU" <<<"$summary" || fail "no GPU line in the summary: $out"
grep -q "^test_good: \[  PASSED  \] 2 tests." <<<"$summary" || fail "no passing test line: $out"
grep -q "^test_bad: \[  FAILED  \] 1 test" <<<"$summary" || fail "no failing test line: $out"
grep -q "^-- gtests: exit 1" <<<"$summary" || fail "gtests not reported failed: $out"
grep -qE "^d=64 causal=1 s=177 +fwd +100.0 +110.0 +1.100x +6/6" <<<"$summary" || fail "no A/B row: $out"
grep -q "^-- ab: exit 0" <<<"$summary" || fail "ab not reported passed: $out"
[ -f "$dir/out/logs/test_bad.log" ] || fail "the failing step's logs were dropped"
[ -f "$dir/out/logs/ab.log" ] && fail "the passing A/B's log was kept"
[ "$(grep -n '^== gtests' <<<"$summary" | cut -d: -f1)" -lt "$(grep -n '^== ab' <<<"$summary" | cut -d: -f1)" ] \
  || fail "steps out of order: $out"

# The deadline: the slow step starts, the ones after it do not; no OLD pack skips the A/B.
mkdir -p "$dir/slow"
printf '#!/usr/bin/env bash\nsleep 2\necho "[  PASSED  ] 1 test."\n' >"$dir/slow/test_slow"
chmod +x "$dir/slow/test_slow"
out=$(PATH="$dir/bin:$PATH" NEW="$dir/slow" OUT="$dir/out2" DEADLINE=1 bash "$session" ab ibench gtests train)
rc=$?
[ $rc -eq 0 ] || fail "deadline run: exit status $rc"
summary=$(sed -n '/^==== session summary/,$p' <<<"$out")
grep -q "(no OLD pack: skipped)" <<<"$summary" || fail "ab without OLD not skipped: $out"
grep -q "(no libvlm_flash_c.so in NEW: skipped)" <<<"$summary" || fail "ibench without the library not skipped: $out"
grep -q "^test_slow: \[  PASSED  \] 1 test." <<<"$summary" || fail "the slow step did not run: $out"
grep -q "^== train: not started (deadline 1 s reached)" <<<"$summary" || fail "train started past the deadline: $out"

# trainab: the pack's vlm against itself and under each TRAINAB_VARIANTS switch, summarized per switch (the stub reads
# its environment: 1000 samples/s, 1100 under VLM_STUB_FAST=1).
mkdir -p "$dir/train"
cat >"$dir/train/vlm" <<'SCRIPT'
#!/usr/bin/env bash
[ "$*" = "bench train --steps 20 --warmup 5 --profile-steps 1 --trace-steps 0" ] || { echo "args: $*"; exit 3; }
[ "${VLM_STUB_FAST:-0}" = 1 ] && v=1100.0 || v=1000.0
echo "vlm.cpp bf16                   $v     45.00     344.7   34.9%     15.44"
SCRIPT
chmod +x "$dir/train/vlm"
out=$(PATH="$dir/bin:$PATH" NEW="$dir/train" OUT="$dir/out4" TRAINAB_VARIANTS="VLM_STUB_FAST=1" bash "$session" trainab)
rc=$?
[ $rc -eq 0 ] || fail "trainab: exit status $rc: $out"
summary=$(sed -n '/^==== session summary/,$p' <<<"$out")
grep -qE "^train bf16 +samples/s +1000.0 +1000.0 +1.000x +2/2" <<<"$summary" || fail "trainab: no self row: $out"
grep -qE "^train bf16 \[VLM_STUB_FAST=1\] +samples/s +1000.0 +1100.0 +1.100x +2/2" <<<"$summary" \
  || fail "trainab: no switch row: $out"
# With OLD, its vlm is the old side (this stub: 900 samples/s), and no variant when TRAINAB_VARIANTS is empty.
mkdir -p "$dir/train_old"
sed 's/v=1000.0/v=900.0/' "$dir/train/vlm" >"$dir/train_old/vlm"
chmod +x "$dir/train_old/vlm"
out=$(PATH="$dir/bin:$PATH" NEW="$dir/train" OLD="$dir/train_old" OUT="$dir/out6" TRAINAB_VARIANTS="" \
  bash "$session" trainab)
rc=$?
[ $rc -eq 0 ] || fail "trainab with OLD: exit status $rc: $out"
summary=$(sed -n '/^==== session summary/,$p' <<<"$out")
grep -qE "^train bf16 +samples/s +900.0 +1000.0 +1.111x +2/2" <<<"$summary" || fail "trainab: no OLD row: $out"
grep -q "VLM_STUB_FAST" <<<"$summary" && fail "trainab: a variant ran with TRAINAB_VARIANTS empty: $out"
out=$(PATH="$dir/bin:$PATH" NEW="$dir/slow" OUT="$dir/out5" bash "$session" trainab)
grep -q "(no vlm in NEW: skipped)" <<<"$out" || fail "trainab without vlm not skipped: $out"

# fswitch: the pack's bench_attention under an attention switch against its default (gpu_flash.sh switches; the stub
# reads its environment: fwd 100 TFLOP/s, 120 under VLM_STUB_FAST=1), summarized per row in the session's summary.
mkdir -p "$dir/flash"
cat >"$dir/flash/bench_attention" <<'SCRIPT'
#!/usr/bin/env bash
[ "${VLM_STUB_FAST:-0}" = 1 ] && v=120.0 || v=100.0
echo "d= 64 causal=0 s= 1024 b=16 h=32 [hopper/hopper]  fwd  $v  bwd   50.0  fwd+bwd   60.0 TFLOP/s  (its halves 1 / 2)"
SCRIPT
chmod +x "$dir/flash/bench_attention"
out=$(PATH="$dir/bin:$PATH" NEW="$dir/flash" OUT="$dir/out6" SWITCHES="VLM_STUB_FAST=1@--head-dims 64" AB_ROUNDS=1 \
  bash "$session" fswitch)
rc=$?
[ $rc -eq 0 ] || fail "fswitch: exit status $rc: $out"
summary=$(sed -n '/^==== session summary/,$p' <<<"$out")
grep -qE "^d=64 causal=0 s=1024 \[VLM_STUB_FAST=1\] +fwd +100.0 +120.0 +1.200x +1/1" <<<"$summary" \
  || fail "fswitch: no switch row: $out"

PATH="$dir/bin:$PATH" NEW="$dir/missing" OUT="$dir/out3" bash "$session" gtests >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a missing pack gave exit status $rc, not 2"
echo "gpu_session_test: ok"
