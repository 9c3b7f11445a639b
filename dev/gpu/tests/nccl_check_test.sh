#!/usr/bin/env bash
# dev/gpu/nccl_check.sh with stand-in binaries (no GPU): it runs the GPU tests, fails when they fail or skip, runs the
# collectives driver and prints the bandwidth alone and under vlm launch with one rank per GPU that nvidia-smi lists.
# usage: nccl_check_test.sh PATH/TO/nccl_check.sh
set -euo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/pack"
cat >"$tmp/bin/nvidia-smi" <<'SH'
#!/bin/sh
echo "GPU 0: NVIDIA H100 (UUID: a)"; echo "GPU 1: NVIDIA H100 (UUID: b)"
SH
cat >"$tmp/pack/dist_collectives_driver" <<'SH'
#!/bin/sh
echo "rank ${RANK:-0} of ${WORLD_SIZE:-1} (nccl): 400 checks, 0 failed"
SH
cat >"$tmp/pack/vlm" <<'SH'
#!/bin/sh
if [ "$1" = bench ]; then echo "bandwidth $* rank=${RANK:-none}"; exit 0; fi
echo "vlm $*"
n=$3
shift 4  # launch --nproc N --
for r in $(seq 0 $((n - 1))); do RANK=$r WORLD_SIZE=$n "$@"; done
SH
write_tests() {  # $1: what the stand-in GPU test binary reports
  case $1 in
    pass) printf '#!/bin/sh\necho "[  PASSED  ] 5 tests."\n' ;;
    skip) printf '#!/bin/sh\necho "[  PASSED  ] 0 tests."\necho "[  SKIPPED ] 5 tests, listed below:"\n' ;;
    fail) printf '#!/bin/sh\necho "[  FAILED  ] 1 test"\nexit 1\n' ;;
  esac >"$tmp/pack/test_dist_nccl"
}
chmod +x "$tmp/bin/nvidia-smi" "$tmp/pack/dist_collectives_driver" "$tmp/pack/vlm"
run() { PATH="$tmp/bin:$PATH" VLM_NCCL_LIB=/opt/nccl/libnccl.so.2 bash "$script" "$tmp/pack" 2>&1; }

write_tests pass; chmod +x "$tmp/pack/test_dist_nccl"
out=$(run) || { echo "$out"; echo "FAIL: a passing check failed"; exit 1; }
bench="bench comm --device cuda --min-bytes 64M --max-bytes 64M --iters 20"
for want in "NCCL: /opt/nccl/libnccl.so.2" "bandwidth $bench rank=none" "rank 1 of 2 (nccl): 400 checks, 0 failed" \
            "vlm launch --nproc 2 -- $tmp/pack/vlm $bench" "bandwidth $bench rank=0" "[nccl_check] PASS"; do
  grep -qF -- "$want" <<<"$out" || { echo "$out"; echo "FAIL: missing '$want'"; exit 1; }
done
for mode in skip fail; do
  write_tests $mode
  if out=$(run); then echo "$out"; echo "FAIL: GPU tests that $mode passed the check"; exit 1; fi
  grep -q "FAIL: GPU tests" <<<"$out" || { echo "$out"; echo "FAIL: no failure line for $mode"; exit 1; }
done
write_tests pass
cat >"$tmp/pack/dist_collectives_driver" <<'SH'
#!/bin/sh
if [ "${RANK:-0}" = 1 ]; then echo "rank 1 of 2 (nccl): 400 checks, 3 failed"; exit 1; fi
echo "rank ${RANK:-0} of ${WORLD_SIZE:-1} (nccl): 400 checks, 0 failed"
SH
if out=$(run); then echo "$out"; echo "FAIL: a rank's failed collective checks passed the check"; exit 1; fi
grep -q "FAIL" <<<"$out" || { echo "$out"; echo "FAIL: no failure line for the driver"; exit 1; }
echo "PASS: nccl_check.sh runs the tests, refuses skipped or failed ones, and launches one rank per GPU"
