#!/usr/bin/env bash
# The one script the GPU machine runs for the FlashAttention work (src/kernels/cuda/flash): the GPU tests,
# compute-sanitizer (memcheck, racecheck) over the test suite, the benchmark with the PyTorch SDPA peer in the same
# run, and an Nsight Compute profile. Binaries come prebuilt for sm_90a (see the copy step below); logs go to $OUT.
#
#   dev/gpu/gpu_flash.sh [step ...]      steps: info tests sanitize bench switches kernels ncu
#                                        (default: info tests sanitize bench)
#
# Environment: FLASH_BIN (default .carry/flash: flash_gpu_test, flash_reference_test, bench_attention, lib/),
# OUT (default ./gpu_flash_out), BENCH_ARGS (extra arguments for bench_attention and the peer, e.g.
# "--head-dims 128 --seqlens 4096"), SAN_FILTER (gtest filter for the sanitizer runs, default the "san" cases),
# STEP_TIMEOUT (seconds per program, default 300), KEEP_LOGS=1 (keep every log even when all passed), KERNEL_SHAPES
# (the kernels step's "d causal seqlen" triples, comma-separated; default "128 yes 2048,128 yes 8192,128 no 2048,
# 128 no 8192,64 yes 4096"), SWITCHES and AB_ROUNDS (the switches step's "VAR=value[,VAR=value...]@bench arguments"
# entries, ';'-separated, default the undecided switches below at the model's shapes and the sweep; rounds per A/B,
# default 3), FLASH_TEST_ENVS and FLASH_SAN_PASSES (the tests step's forced-switch runs and the sanitize step's
# passes, to shorten a call; see those steps).
# VLM_FLASH_PERSISTENT=0/1 forces the kernels' schedule (tests runs the Hopper cases under
# both), VLM_FLASH_WIDE_KEYS=0/1 the forward's key step, VLM_FLASH_DYNAMIC=0/1 its causal tile counter (tests and
# sanitize run them with 1 too),
# VLM_FLASH_CAUSAL_WIDE=0/1 the d=128 causal forward's mixed 128/160-key steps (by default from 8k keys; tests and
# sanitize: 1 too),
# VLM_FLASH_FWD_ROWS64=0/1 the d=64 causal forward's 64-row tiles (by default rows of at most 256 queries; tests: 0
# and 1 too, sanitize: 1);
# the sanitize step also runs with VLM_FLASH_WIDE_KEYS=1 (the d=128 forward's mixed non-causal steps on every
# shape). The tests and sanitize steps take ~10 minutes together on an H100: give them a call of their own.
# To prepare the binaries on the build machine:
#   cmake --build build-flash --target flash_gpu_test flash_reference_test bench_attention
#   mkdir -p .carry/flash/lib && cp build-flash/tests/kernels/flash/flash_{gpu,reference}_test \
#     build-flash/bench/attention-via-flash/bench_attention .carry/flash/
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)  # the sibling scripts (gpu_ab.sh, ab_summary.py); bench/peers/ is read from the
                                     # working directory, the repo root on the GPU machine
BIN=${FLASH_BIN:-.carry/flash}
OUT=${OUT:-gpu_flash_out}
SAN_FILTER=${SAN_FILTER:-'*_san:FlashGpuApi.*'}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}  # seconds per program, so a hung kernel cannot eat the lease
run() { timeout -k 5 "$STEP_TIMEOUT" "$@"; }
read -r -a BENCH_EXTRA <<<"${BENCH_ARGS:-}"
mkdir -p "$OUT"
: >>"$OUT/summary.log"
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(info tests sanitize bench)
status=0
note() { printf '\n==== %s\n' "$*" | tee -a "$OUT/summary.log"; }

for step in "${steps[@]}"; do
  case $step in
    info)
      note "info"
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee -a "$OUT/summary.log"
      ldd "$BIN/flash_gpu_test" | grep -i "not found" | tee -a "$OUT/summary.log"
      ;;
    tests)
      note "tests"
      run "$BIN/flash_reference_test" >"$OUT/tests.log" 2>&1 || status=1
      run "$BIN/flash_gpu_test" >>"$OUT/tests.log" 2>&1 || status=1
      if [ -x "$BIN/flash_c_api_test" ]; then  # the C ABI (libvlm_flash_c.so), where the pack has it
        run "$BIN/flash_c_api_test" >>"$OUT/tests.log" 2>&1 || status=1
      fi
      # The Hopper kernels once more under each forced switch, so every path sees every shape whichever the automatic
      # choice picks: every problem one item per CTA (PERSISTENT=0) and persistent (1); the forward's wide key steps
      # on every non-causal shape (by default only long rows, which few test shapes have); every causal forward on
      # the tile counter (by default rows over 256 queries); causal tiles computing every exponential (by default they
      # skip those past the diagonal); the d=128 causal forward's mixed 128/160-key steps on every causal shape (by
      # default from 8k keys); the d=64 causal forward's 64-row tiles (two CTAs an SM) on no shape, and on every
      # shape, also with the causal counter (by default rows of at most 256 queries, on fixed lists).
      # FLASH_TEST_ENVS (';'-separated entries of VAR=value words) replaces the list, empty for none.
      # (`run env ...`: run is a shell function, which env cannot start.)
      default_test_envs="VLM_FLASH_PERSISTENT=0;VLM_FLASH_PERSISTENT=1;VLM_FLASH_WIDE_KEYS=1;VLM_FLASH_DYNAMIC=1"
      default_test_envs+=";VLM_FLASH_CAUSAL_WIDE=1;VLM_FLASH_FWD_ROWS64=0"
      default_test_envs+=";VLM_FLASH_FWD_ROWS64=1;VLM_FLASH_FWD_ROWS64=1 VLM_FLASH_DYNAMIC=1"
      IFS=';' read -r -a test_envs <<<"${FLASH_TEST_ENVS-$default_test_envs}"
      for e in "${test_envs[@]}"; do
        [ -n "$e" ] || continue
        filter='-*portable*'
        echo "==== $e" >>"$OUT/tests.log"
        run env $e "$BIN/flash_gpu_test" --gtest_filter="$filter" >>"$OUT/tests.log" 2>&1 || status=1
      done
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|err |bound|was written|differs" "$OUT/tests.log" \
        | grep -v "^\[       OK" | tail -40 | tee -a "$OUT/summary.log"
      ;;
    sanitize)
      # The small cases as they run by default, then with every causal forward on the tile counter, then with the
      # d=128 causal forward's mixed key steps on every causal shape, then with the d=64 causal forward's 64-row tiles on every causal shape, with the counter.
      # FLASH_SAN_PASSES (space-separated TOOL[:SETTING] words) replaces the list.
      default_san_passes="memcheck racecheck memcheck:dynamic racecheck:dynamic memcheck:wide racecheck:wide"
      default_san_passes+=" memcheck:rows64 racecheck:rows64 memcheck:keys racecheck:keys"
      read -r -a san_passes <<<"${FLASH_SAN_PASSES:-$default_san_passes}"
      for pass in "${san_passes[@]}"; do
        tool=${pass%%:*}
        envs=()
        [ "$pass" = "$tool:dynamic" ] && envs=(VLM_FLASH_DYNAMIC=1)
        [ "$pass" = "$tool:wide" ] && envs=(VLM_FLASH_CAUSAL_WIDE=1)
        [ "$pass" = "$tool:rows64" ] && envs=(VLM_FLASH_FWD_ROWS64=1 VLM_FLASH_DYNAMIC=1)
        [ "$pass" = "$tool:keys" ] && envs=(VLM_FLASH_WIDE_KEYS=1)
        note "compute-sanitizer $tool ($SAN_FILTER) ${envs[*]}"
        env "${envs[@]}" timeout -k 5 "$STEP_TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 3 \
          "$BIN/flash_gpu_test" --gtest_filter="$SAN_FILTER" >"$OUT/sanitize_${pass/:/_}.log" 2>&1
        rc=$?
        [ $rc -ne 0 ] && status=1
        { echo "exit $rc"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |Invalid|Race|hazard" \
            "$OUT/sanitize_${pass/:/_}.log" | sort | uniq -c | head -20; } | tee -a "$OUT/summary.log"
      done
      ;;
    bench)
      note "bench (peer: PyTorch SDPA, same run)"
      # The SM clock, power and clock-event reasons every 200 ms while both run (slow spells of about a second were
      # seen to land on single rows): clocks.csv, summarized below.
      reasons=clocks_event_reasons.active
      nvidia-smi --help-query-gpu | grep -q "$reasons" || reasons=clocks_throttle_reasons.active
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$reasons --format=csv,noheader -lms 200 \
        >"$OUT/clocks.csv" 2>/dev/null &
      smi=$!
      PYTHONUNBUFFERED=1 run python3 bench/peers/attention_sdpa.py --json "$OUT/peer.json" "${BENCH_EXTRA[@]}" \
        >"$OUT/peer.log" 2>&1 || { status=1; tail -5 "$OUT/peer.log"; }
      echo "ours from $(date +%H:%M:%S.%N | cut -c1-12)" >>"$OUT/peer.log"  # where ours starts in clocks.csv
      run "$BIN/bench_attention" --peer-json "$OUT/peer.json" --json "$OUT/ours.json" "${BENCH_EXTRA[@]}" \
        >"$OUT/bench.log" 2>&1 || status=1
      kill "$smi" 2>/dev/null
      cat "$OUT/peer.log" "$OUT/bench.log" | tee -a "$OUT/summary.log" >/dev/null
      awk -F', ' '{ split($2, c, " "); split($3, w, " "); n++; s += c[1]; if (n == 1 || c[1] < lo) lo = c[1];
                    if (w[1] > hi) hi = w[1]; r[$5]++ }
                  END { printf "SM clock over %d samples: mean %.0f MHz, min %d; power max %.0f W; event reasons:", n,
                        s / (n ? n : 1), lo, hi; for (k in r) printf " %s x%d", k, r[k]; print "" }' "$OUT/clocks.csv" \
        | tee -a "$OUT/summary.log"
      sed -n '/^| d |/,$p' "$OUT/bench.log"
      ;;
    switches)
      # The experimental switches against the default, one binary, alternating (dev/gpu/gpu_ab.sh, AB_ROUNDS rounds):
      # per shape set one A/B whose old side is the default and whose new side is the default again (its ratio is
      # the call's noise), plus one variant per switch (AB_VARIANTS), summarized as medians and new/old per row
      # (dev/gpu/ab_summary.py). SWITCHES: "VAR=value[,VAR=value...]@bench arguments" entries separated by ';' (a
      # comma-separated list measures each setting as its own variant; a variant of several words, e.g.
      # "VLM_FLASH_FWD_ROWS64=1 VLM_FLASH_DYNAMIC=1", sets them together). By default the last decided threshold:
      # the d=128 non-causal forward's key steps (wide, mixed, from 2k keys) forced off and on over the sweep.
      default_switches="VLM_FLASH_WIDE_KEYS=0,VLM_FLASH_WIDE_KEYS=1@--head-dims 128 --causal no"
      default_switches+=" --seqlens 1024,2048,4096,8192"
      IFS=';' read -r -a entries <<<"${SWITCHES:-$default_switches}"
      n=0
      for entry in "${entries[@]}"; do
        vars=${entry%%@*}
        read -r -a args <<<"${entry#*@}"
        n=$((n + 1))
        note "switches ${vars//,/ | } against the default (and the default again): ${args[*]}"
        AB_VARIANTS="${vars//,/;}" AB_GREP='^d=' ROUNDS="${AB_ROUNDS:-3}" AB_TIMEOUT="$STEP_TIMEOUT" \
          "$here/gpu_ab.sh" "$BIN/bench_attention" "$BIN/bench_attention" "${args[@]}" >"$OUT/switch_$n.log" 2>&1 \
          || status=1
        python3 "$here/ab_summary.py" "$OUT/switch_$n.log" | tee -a "$OUT/summary.log" || status=1
      done
      ;;
    kernels)
      # Each kernel's duration alone on the GPU (ncu, boost clocks), ours and cuDNN's through the SDPA peer: event
      # timings of the peer include Python's and autograd's host time between kernels, so this is the like-for-like
      # comparison of the kernels themselves.
      IFS=, read -r -a shapes <<<"${KERNEL_SHAPES:-128 yes 2048,128 yes 8192,128 no 2048,128 no 8192,64 yes 4096}"
      for shape in "${shapes[@]}"; do
        read -r d causal seqlen <<<"$shape"
        note "kernel durations: d=$d causal=$causal s=$seqlen (median over launches, us)"
        args=(--head-dims "$d" --causal "$causal" --seqlens "$seqlen" --iters 3 --warmup 1)
        for side in cudnn ours; do
          if [ $side = cudnn ]; then
            cmd=(python3 bench/peers/attention_sdpa.py --backends cudnn "${args[@]}")
          else
            cmd=("$BIN/bench_attention" "${args[@]}")
          fi
          run ncu --csv --clock-control none --metrics gpu__time_duration.sum "${cmd[@]}" >"$OUT/kernels_$side.csv" \
            2>"$OUT/kernels_$side.log" || status=1
          echo "  $side:" | tee -a "$OUT/summary.log"
          python3 "$(dirname "$0")/kernel_profile.py" "$OUT/kernels_$side.csv" --medians --min-us 20 \
            | grep -v "fill_kernel\|distribution_elementwise" | tee -a "$OUT/summary.log"
        done
      done
      ;;
    ncu)
      note "ncu (d=128, s=4096, one launch of each kernel)"
      run ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -k regex:flash --launch-skip 4 \
        --launch-count 4 "$BIN/bench_attention" --head-dims 128 --seqlens 4096 --causal no --iters 1 --warmup 1 \
        "${BENCH_EXTRA[@]}" >"$OUT/ncu.log" 2>&1 || status=1
      grep -E "flash_|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Tensor|Block Limit" \
        "$OUT/ncu.log" | head -60
      ;;
    *)
      echo "unknown step $step" >&2
      status=2
      ;;
  esac
done
# The device tool returns only the output's tail and a few files: the whole summary goes last, and unless KEEP_LOGS=1
# the full logs of a run that passed are dropped (their summaries are in summary.log), leaving summary.log, the
# bench's two JSON files and clocks.csv.
if [ "$status" = 0 ] && [ "${KEEP_LOGS:-0}" != 1 ]; then
  rm -f "$OUT"/tests.log "$OUT"/sanitize_*.log "$OUT"/kernels_*.csv "$OUT"/kernels_*.log "$OUT"/peer.log "$OUT"/bench.log
fi
printf '\n==== summary (%s)\n' "$OUT/summary.log"
cat "$OUT/summary.log"
exit $status
