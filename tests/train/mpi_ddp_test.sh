#!/bin/sh
# Data-parallel training on 2 MPI ranks (the test fixture's tiny run: 6 steps, checkpoints at 3 and 6):
#   - the replica check passes on equal weights and catches one changed weight on one rank;
#   - the run finishes on both ranks with the same final loss, and its replicas agree (checked by the trainer);
#   - rank 0 alone writes metrics.jsonl: 6 step records, not 12, and evals at steps 2 and 4 and the end;
#   - a run stopped after step 3 and resumed gives the uninterrupted run's losses at steps 4-6, bit for bit;
#   - its checkpoint keeps both data streams' loader states, and 1 rank resumes it (hosting both streams);
#   - a rank failing before the first step ends the whole job with its error instead of leaving rank 0 waiting.
# Exit 77 (ctest: skipped) without mpirun or without an MPI build.
# usage: mpi_ddp_test.sh PATH/TO/ddp_driver
set -eu
driver="$1"
if ! command -v mpirun >/dev/null 2>&1; then echo "mpirun not found: skipped"; exit 77; fi
mpi="timeout 120 mpirun -np 2 --oversubscribe --allow-run-as-root"  # a hung collective fails, not stalls
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# "step loss" per train record (the records' keys are sorted: loss before step).
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"loss": *\([-0-9.e+]*\).*"step": *\([0-9]*\).*/\2 \1/'; }

if ! out=$($mpi "$driver" replicas 2>&1); then
  if echo "$out" | grep -q "built without MPI"; then echo "vlm_dist built without MPI: skipped"; exit 77; fi
  echo "$out"; fail "replica check"
fi
echo "$out"
[ "$(echo "$out" | grep -c 'replicas agree; drifted .*rank(s) 1 differ')" -eq 2 ] || fail "replica check output"

"$driver" prepare "$tmp/data"
$mpi "$driver" run "$tmp/data" "$tmp/full" > "$tmp/full.log" 2>&1 || { cat "$tmp/full.log"; fail "the 2-rank run"; }
grep "^rank" "$tmp/full.log"
[ "$(grep -c '^rank [01]: step 6 loss' "$tmp/full.log")" -eq 2 ] || fail "both ranks did not finish step 6"
[ "$(grep '^rank [01]: step 6 loss' "$tmp/full.log" | sed 's/.*loss //' | sort -u | wc -l)" -eq 1 ] \
  || fail "the ranks report different losses"
grep -q "the 2 ranks' weights agree" "$tmp/full.log" || fail "no replica agreement logged"
[ "$(losses "$tmp/full" | wc -l)" -eq 6 ] || fail "metrics.jsonl does not hold 6 step records: $(losses "$tmp/full")"
[ "$(grep -c '"eval/vqa/accuracy"' "$tmp/full/metrics.jsonl")" -eq 3 ] || fail "expected 3 eval records (steps 2, 4, 6)"
grep -q '"stream_loader_states"' "$tmp/full/checkpoints/step_00000006/trainer_state.json" \
  || fail "the checkpoint does not keep each data stream's loader state"

$mpi "$driver" run "$tmp/data" "$tmp/resumed" 3 > "$tmp/stop.log" 2>&1 || { cat "$tmp/stop.log"; fail "stop at 3"; }
$mpi "$driver" resume "$tmp/data" "$tmp/resumed" > "$tmp/resume.log" 2>&1 || { cat "$tmp/resume.log"; fail "resume"; }
losses "$tmp/full" > "$tmp/full.losses"
losses "$tmp/resumed" > "$tmp/resumed.losses"
cmp "$tmp/full.losses" "$tmp/resumed.losses" || { paste "$tmp/full.losses" "$tmp/resumed.losses"; fail "resume"; }

$mpi "$driver" run "$tmp/data" "$tmp/one" 3 > "$tmp/stop1.log" 2>&1 || { cat "$tmp/stop1.log"; fail "stop at 3"; }
"$driver" resume "$tmp/data" "$tmp/one" > "$tmp/world.log" 2>&1 || { cat "$tmp/world.log"; fail "resume on 1 rank"; }
grep -q "(2 data streams on 1 rank(s))" "$tmp/world.log" || { cat "$tmp/world.log"; fail "world size"; }
if $mpi "$driver" fail-last "$tmp/data" "$tmp/failing" > "$tmp/fail.log" 2>&1; then
  fail "a run with a failing rank succeeded"
fi
grep -q "rank 1 of 2: .*aborting every rank" "$tmp/fail.log" || { cat "$tmp/fail.log"; fail "no abort"; }
echo "PASS: 2-rank data parallel: replicas agree, resume repeats steps 4-6 bit for bit, 1 rank resumes it," \
  "a failing rank ends the job"
