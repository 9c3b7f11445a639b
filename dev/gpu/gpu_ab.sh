#!/usr/bin/env bash
# Same-call A/B of two builds of one program on the GPU machine: machine-to-machine spread is larger than most
# changes, so only ratios measured in one call count (dev/log/benchmarks.md). Runs the old and the new
# binary alternately, ROUNDS times, each run under a time limit (a hung kernel must not eat the session's device
# time), and prints the lines that match AB_GREP, labelled.
#
#   dev/gpu/gpu_ab.sh OLD_BINARY NEW_BINARY [ARGS...]
#
# Environment: ROUNDS (default 2), AB_TIMEOUT (seconds per run, default 120), AB_GREP (extended regex of the lines to
# keep, default: every line), AB_ENV_OLD / AB_ENV_NEW (extra VAR=value words for one side's runs only, e.g.
# "VLM_FLASH_PERSISTENT=0"; with both, OLD and NEW may be one binary), AB_VARIANTS (';'-separated lists of VAR=value
# words: each round then runs the new binary once more per entry, after AB_ENV_NEW's words, labelled
# "new[ENTRY]", so several switches are measured against one old side in one call; dev/gpu/ab_summary.py gives each
# its own column). Exit status: 1 if any run failed or timed out.
# Example (attention, d=128 rows of the sweep):
#   AB_GREP='^d=' dev/gpu/gpu_ab.sh /tmp/old/bench_attention /tmp/new/bench_attention --head-dims 128 --causal both
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: dev/gpu/gpu_ab.sh OLD_BINARY NEW_BINARY [ARGS...]" >&2; exit 2; }
old=$1
new=$2
shift 2
for exe in "$old" "$new"; do
  [ -x "$exe" ] || { echo "gpu_ab: $exe is not an executable" >&2; exit 2; }
done
rounds=${ROUNDS:-2}
limit=${AB_TIMEOUT:-120}
pattern=${AB_GREP:-.}
read -r -a old_env <<<"${AB_ENV_OLD:-}"
read -r -a new_env <<<"${AB_ENV_NEW:-}"
IFS=';' read -r -a variants <<<"${AB_VARIANTS:-}"
sides=(old new)
for v in "${variants[@]}"; do
  v=$(echo "$v" | xargs)  # trimmed
  [ -n "$v" ] && sides+=("new[$v]")
done
status=0
for ((r = 1; r <= rounds; r++)); do
  # Even rounds run the sides in reverse order: a drift over the call (the GPU warming, a power-capped spell) then
  # lands on both sides alike. With one fixed order, two identical binaries differed by 2-4% on every d=128 row
  # (H100, 2026-12-06).
  order=("${sides[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[i]}"); done
  fi
  for side in "${order[@]}"; do
    exe=$old
    envs=("${old_env[@]}")
    if [ "$side" != old ]; then
      exe=$new
      envs=("${new_env[@]}")
      if [ "$side" != new ]; then
        read -r -a extra <<<"${side:4:${#side}-5}"
        envs+=("${extra[@]}")
      fi
    fi
    echo "== round $r, $side: $exe ${envs[*]}"
    out=$(env "${envs[@]}" timeout -k 5 "$limit" "$exe" "$@" 2>&1)
    rc=$?
    grep -E -- "$pattern" <<<"$out"
    if [ $rc -ne 0 ]; then
      status=1
      [ $rc -eq 124 ] && echo "   (timed out after ${limit} s)" || echo "   (exit status $rc)"
      [ -n "$out" ] && tail -5 <<<"$out" | sed 's/^/   | /'
    fi
  done
done
exit $status
