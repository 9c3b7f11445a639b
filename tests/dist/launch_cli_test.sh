#!/bin/sh
# `vlm launch` end to end: ranks of a shell command and of vlm itself with their lines tagged, a rank killed with
# SIGKILL that ends the launch (status 137, naming the rank and the signal) within seconds, a SIGTERM to the launcher
# passed on to every rank, ranks that go with a launcher killed outright, and usage errors.
# usage: launch_cli_test.sh PATH/TO/vlm
set -eu
vlm="$1"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$vlm" launch --nproc 2 -- sh -c 'echo "hi $RANK of $WORLD_SIZE"')
echo "$out"
echo "$out" | grep -qx "\[rank 0\] hi 0 of 2" || fail "rank 0's line"
echo "$out" | grep -qx "\[rank 1\] hi 1 of 2" || fail "rank 1's line"

out=$("$vlm" launch --nproc 2 -- "$vlm" --help)
echo "$out" | grep -q "^\[rank 1\] usage: vlm <command>" || fail "vlm --help under vlm launch"

start=$(date +%s)
status=0
err=$("$vlm" launch --nproc 3 --kill-after 2 -- sh -c \
  'if [ "$RANK" = 1 ]; then sleep 0.3; kill -9 $$; fi; exec sleep 60' 2>&1) || status=$?
took=$(( $(date +%s) - start ))
echo "$err"
[ "$status" -eq 137 ] || fail "a rank killed by SIGKILL: vlm launch exited $status, not 137"
echo "$err" | grep -q "vlm launch: rank 1 was killed by signal 9 (SIGKILL); the other 2 ranks were stopped" ||
  fail "no message naming rank 1 and SIGKILL"
[ "$took" -lt 15 ] || fail "the launch took $took s to end after a rank died"

status=0
"$vlm" launch --nproc 2 -- sh -c 'exit $((RANK + 4))' 2>/dev/null || status=$?
[ "$status" -eq 4 ] || [ "$status" -eq 5 ] || fail "a rank's exit status 4 or 5 was not passed on ($status)"

# SIGTERM to vlm launch goes to every rank; the launch ends with 128 + 15.
log=$(mktemp)
"$vlm" launch --nproc 2 -- sh -c 'trap "echo got TERM; exit 0" TERM; echo ready; sleep 60 & wait' >"$log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ "$(grep -c ready "$log")" -eq 2 ] && break; sleep 0.1; done
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
cat "$log"
[ "$status" -eq 143 ] || fail "SIGTERM to vlm launch: status $status, not 143"
[ "$(grep -c "got TERM" "$log")" -eq 2 ] || fail "not every rank got the SIGTERM"
grep -q "vlm launch received signal 15 (SIGTERM) and passed it to every rank" "$log" || fail "no signal message"
rm -f "$log"

# vlm launch killed outright (SIGKILL): its ranks go with it.
pids=$(mktemp)
"$vlm" launch --nproc 2 -- sh -c "echo \$\$ >>$pids; exec sleep 60" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ "$(wc -l <"$pids")" -eq 2 ] && break; sleep 0.1; done
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
sleep 0.5
for rank_pid in $(cat "$pids"); do  # gone, or a zombie left to an init that does not reap
  state=$(ps -o stat= -p "$rank_pid" 2>/dev/null || true)
  case $state in
    ""|Z*) ;;
    *) kill -KILL "$rank_pid"; fail "rank $rank_pid outlived its killed launcher" ;;
  esac
done
rm -f "$pids"

status=0; "$vlm" launch --nproc 2 2>/dev/null || status=$?
[ "$status" -eq 2 ] || fail "no command: status $status, not 2"
status=0; "$vlm" launch -- true 2>/dev/null || status=$?
[ "$status" -eq 2 ] || fail "no --nproc: status $status, not 2"
echo "PASS: vlm launch ran, tagged and stopped its ranks (the killed launch ended in $took s)"
