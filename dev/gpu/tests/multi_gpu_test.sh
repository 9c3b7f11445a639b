#!/usr/bin/env bash
# dev/gpu/multi_gpu.sh in its CPU mode (DEVICE=cpu: MPI ranks, the tiny model, a few steps) end to end: every step
# on one and two ranks exits 0, the JSON lines hold the collectives, the parity of each strategy (passing) and the
# scaling records, and the summary has its three tables. Then NVLink multicast switched on is refused before anything
# runs. Exit 77 (skipped) without mpirun.
# usage: multi_gpu_test.sh PATH/TO/multi_gpu.sh PATH/TO/vlm
set -euo pipefail
script=$1 vlm=$2
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$(dirname "$script")/../.."  # the repo root: configs/ and bench/ are read from there
out=$(DEVICE=cpu VLM="$vlm" OUT="$tmp/out" WORK="$tmp/work" PARITY_STEPS=3 BENCH_STEPS=1 COMM_MAX=8K COMM_ITERS=2 bash "$script" 2>&1) ||
  { echo "$out"; echo "FAIL: the CPU run failed"; exit 1; }
for n in 1 2; do
  for step in comm parity scaling; do
    grep -q "^$step N=$n: exit 0" <<<"$out" || { echo "$out"; echo "FAIL: $step N=$n did not pass"; exit 1; }
  done
done
python3 - "$tmp/out/multi_gpu.jsonl" <<'PY' || { echo "$out"; exit 1; }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
comm = [r for r in rows if r["step"] == "comm"]
parity = [r for r in rows if r["step"] == "parity"]
scaling = [r for r in rows if r["step"] == "scaling"]
assert len(comm) == 2 * 3 * 2 * 2, f"{len(comm)} comm records"  # 2 world sizes x 3 collectives x 2 dtypes x 2 sizes
assert sorted((r["n"], r["strategy"]) for r in parity) == [(n, s) for n in (1, 2) for s in
                                                              ("full_shard", "no_shard", "shard_grad_op")], parity
assert all(r["pass"] and r["steps"] == 3 for r in parity), parity
assert sorted(r["n"] for r in scaling) == [1, 2] and all("scaling_efficiency" in r for r in scaling), scaling
assert all(r["world_size"] == r["n"] and len(r["ranks"]) == r["n"] for r in scaling), scaling
print("multi_gpu.jsonl: comm, parity and scaling records for 1 and 2 ranks")
PY
for section in "## Collectives" "## Loss parity" "## Weak scaling"; do
  grep -q "^$section" "$tmp/out/summary.md" || { cat "$tmp/out/summary.md"; echo "FAIL: no '$section'"; exit 1; }
done
[ -f "$tmp/out/logs.tar" ] || { echo "FAIL: the step logs were not packed"; exit 1; }

if out=$(NCCL_NVLS_ENABLE=1 DEVICE=cpu VLM="$vlm" OUT="$tmp/out2" WORK="$tmp/work2" bash "$script" 2>&1); then
  echo "$out"; echo "FAIL: NCCL_NVLS_ENABLE=1 was accepted"; exit 1
fi
grep -q "NCCL_NVLS_ENABLE=1: NVLink multicast must stay off" <<<"$out" || { echo "$out"; echo "FAIL: no refusal"; exit 1; }
echo "PASS: multi_gpu.sh runs every step on 1 and 2 CPU ranks, summarizes them, and refuses NVLink multicast"
