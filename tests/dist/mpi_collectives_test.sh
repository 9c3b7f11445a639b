#!/bin/sh
# The communicator's collectives alone (world of one) and under mpirun with 2, 3 and 4 ranks: every rank checks every
# result, blocking and asynchronous, against its closed form. Then the watchdog: with VLM_DIST_TIMEOUT_S=2, an
# all_gather that one rank never joins must end the job within seconds, with rank 0's error naming the collective,
# its size and the time waited. Exit 77 (ctest: skipped) without mpirun or without an MPI build.
# usage: mpi_collectives_test.sh PATH/TO/dist_collectives_driver
set -eu
driver="$1"
"$driver" check
if ! command -v mpirun >/dev/null 2>&1; then echo "mpirun not found: MPI part skipped"; exit 77; fi
if ! "$driver" has-mpi; then echo "vlm_dist built without MPI: MPI part skipped"; exit 77; fi
for n in 2 3 4; do
  out=$(mpirun -np "$n" --oversubscribe --allow-run-as-root "$driver" check)
  echo "$out"
  passed=$(echo "$out" | grep -c "of $n (mpi): .* 0 failed")
  [ "$passed" -eq "$n" ] || { echo "FAIL: $passed of $n ranks passed"; exit 1; }
done

start=$(date +%s)
if out=$(mpirun -np 2 --oversubscribe --allow-run-as-root -x VLM_DIST_TIMEOUT_S=2 "$driver" hang 2>&1); then
  echo "$out"; echo "FAIL: a collective one rank never joined did not fail the job"; exit 1
fi
took=$(( $(date +%s) - start ))
echo "$out"
echo "$out" | grep -q "rank 0: all_gather of 1001 f32 elements (mpi, 2 ranks) did not complete within 2 s" ||
  { echo "FAIL: no timeout error naming rank 0, the collective and its size"; exit 1; }
[ "$took" -lt 30 ] || { echo "FAIL: the hung job took $took s to end"; exit 1; }
echo "PASS: collectives checked alone and on 2, 3 and 4 MPI ranks; a hung collective ended the job in $took s"
