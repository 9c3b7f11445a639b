#!/bin/sh
# The TCP rendezvous store across processes under `vlm launch`: 4 ranks meet through MASTER_ADDR:MASTER_PORT and
# read rank 0's value; then, with VLM_DIST_TIMEOUT_S=2, a rank that leaves without joining is named by the others,
# and the launch fails within seconds.
# usage: launch_rendezvous_test.sh PATH/TO/vlm PATH/TO/dist_collectives_driver
set -eu
vlm="$1"
driver="$2"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$vlm" launch --nproc 4 -- "$driver" rendezvous)
echo "$out"
[ "$(echo "$out" | grep -c "of 4: from rank 0 of 4")" -eq 4 ] || fail "not every rank read rank 0's value"

start=$(date +%s)
status=0
err=$(VLM_DIST_TIMEOUT_S=2 "$vlm" launch --nproc 3 -- "$driver" rendezvous-missing 2>&1) || status=$?
took=$(( $(date +%s) - start ))
echo "$err"
[ "$status" -eq 1 ] || fail "a rank that never joined: vlm launch exited $status, not 1"
echo "$err" | grep -q "waited 2 s (VLM_DIST_TIMEOUT_S); rank 2 never came" || fail "the missing rank is not named"
[ "$took" -lt 20 ] || fail "the rendezvous took $took s to fail"
echo "PASS: 4 ranks met in the launch's store; a missing rank was named in $took s"
