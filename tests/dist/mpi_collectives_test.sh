#!/bin/sh
# The communicator's collectives alone (world of one) and under mpirun with 2 and 4 ranks: every rank checks every
# result against its closed form. Exit 77 (ctest: skipped) without mpirun or without an MPI build.
# usage: mpi_collectives_test.sh PATH/TO/dist_collectives_driver
set -eu
driver="$1"
"$driver" check
if ! command -v mpirun >/dev/null 2>&1; then echo "mpirun not found: MPI part skipped"; exit 77; fi
if ! "$driver" has-mpi; then echo "vlm_dist built without MPI: MPI part skipped"; exit 77; fi
for n in 2 4; do
  out=$(mpirun -np "$n" --oversubscribe --allow-run-as-root "$driver" check)
  echo "$out"
  passed=$(echo "$out" | grep -c "of $n (mpi): .* 0 failed")
  [ "$passed" -eq "$n" ] || { echo "FAIL: $passed of $n ranks passed"; exit 1; }
done
echo "PASS: collectives checked alone and on 2 and 4 MPI ranks"
