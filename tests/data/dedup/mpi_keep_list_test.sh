#!/bin/sh
# Spreading the dedup job over 3 MPI ranks must give byte-identical outputs to one process: keep.jsonl,
# removed.jsonl and every rewritten shard. Exit 77 (ctest: skipped) without mpirun or without an MPI build.
# usage: mpi_keep_list_test.sh PATH/TO/dedup_mpi_driver
set -eu
driver="$1"
if ! command -v mpirun >/dev/null 2>&1; then echo "mpirun not found: skipped"; exit 77; fi
if ! "$driver" has-mpi; then echo "vlm_dist built without MPI: skipped"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/data"
"$driver" make-data "$tmp/data"
"$driver" run "$tmp/data" "$tmp/single" > "$tmp/single.log"
mpirun -np 3 --oversubscribe --allow-run-as-root "$driver" run "$tmp/data" "$tmp/mpi" > "$tmp/mpi.log"
cat "$tmp/mpi.log"
grep -q "rank 2 of 3" "$tmp/mpi.log" || { echo "FAIL: the MPI run did not have 3 ranks"; exit 1; }
grep -q '"ranks": 3' "$tmp/mpi/report.json" || { echo "FAIL: report.json does not say 3 ranks"; exit 1; }
cmp "$tmp/single/keep.jsonl" "$tmp/mpi/keep.jsonl"
cmp "$tmp/single/removed.jsonl" "$tmp/mpi/removed.jsonl"
n=0
for f in "$tmp/single/shards/"*.tar; do
  cmp "$f" "$tmp/mpi/shards/$(basename "$f")"
  n=$((n + 1))
done
# A shard whose samples are all duplicates is not written (the last one here): both runs must agree on which.
[ "$(ls "$tmp/single/shards")" = "$(ls "$tmp/mpi/shards")" ] || { echo "FAIL: different rewritten shard sets"; exit 1; }
[ "$n" -ge 3 ] || { echo "FAIL: expected at least 3 rewritten shards, found $n"; exit 1; }
echo "PASS: keep-list, removed list and $n rewritten shards equal across 1 and 3 ranks ($(wc -l < "$tmp/single/keep.jsonl") kept)"
