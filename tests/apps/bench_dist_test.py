#!/usr/bin/env python3
"""The multi-rank benchmarks on the CPU: `vlm bench comm` alone and under mpirun -np 2 and 3 (MPI), tiny sizes.

Every collective's values are checked inside the benchmark (a wrong result exits non-zero); here: the sizes double
from --min-bytes to --max-bytes, each buffer is a whole number of per-rank slices, busbw follows nccl-tests'
definitions from algbw (all_gather / reduce_scatter (n - 1) / n, all_reduce 2 (n - 1) / n), a peer file's busbw
comes back beside ours with the ratio, and bad flags are refused naming the flag.
usage: bench_dist_test.py VLM
Exits 77 (skipped) without mpirun.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

vlm = sys.argv[1]
tmp = tempfile.mkdtemp()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(np, *args, timeout=240):
    cmd = [vlm, *args] if np == 0 else ["mpirun", "-np", str(np), "--oversubscribe", "--allow-run-as-root", vlm, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail(" ".join(cmd) + f": exit {p.returncode}")
    return p.stdout


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# Bad flags: exit 2 naming the flag.
for bad in (["--min-bytes", "12Q"], ["--dtypes", "f64"], ["--collectives", "broadcast"], ["--iters", "0"],
            ["--min-bytes", "2M", "--max-bytes", "1M"]):
    p = subprocess.run([vlm, "bench", "comm", "--device", "cpu", *bad], capture_output=True, text=True)
    if p.returncode != 2 or ("bench comm" not in p.stderr):
        fail(f"bench comm {bad}: exit {p.returncode}, stderr {p.stderr!r}")

if shutil.which("mpirun") is None:
    print("mpirun not found: skipped")
    sys.exit(77)

for np in (0, 2, 3):
    ranks = max(np, 1)
    out = os.path.join(tmp, f"comm{np}.jsonl")
    text = run(np, "bench", "comm", "--device", "cpu", "--min-bytes", "4K", "--max-bytes", "32K", "--warmup", "1",
               "--iters", "3", "--json", out)
    rows = read_jsonl(out)
    if len(rows) != 3 * 2 * 4:
        fail(f"-np {ranks}: {len(rows)} rows, expected 24 (3 collectives x 2 dtypes x 4 sizes)\n{text}")
    for r in rows:
        elt = 2 if r["dtype"] == "bf16" else 4
        if r["ranks"] != ranks or r["bytes"] % (elt * ranks) != 0:
            fail(f"-np {ranks}: bad row {r}")
        factor = 2 * (ranks - 1) / ranks if r["collective"] == "all_reduce" else (ranks - 1) / ranks
        if abs(r["busbw_gbps"] - r["algbw_gbps"] * factor) > 1e-9 * max(1, r["algbw_gbps"]):
            fail(f"-np {ranks}: busbw is not algbw x {factor}: {r}")
        if abs(r["algbw_gbps"] - r["bytes"] / (r["time_us"] * 1e-6) / 1e9) > 1e-6 * r["algbw_gbps"]:
            fail(f"-np {ranks}: algbw is not bytes / time: {r}")
    sizes = sorted({r["bytes"] for r in rows if r["dtype"] == "f32" and r["collective"] == "all_gather"})
    want = [(s // 4 // ranks) * ranks * 4 for s in (4096, 8192, 16384, 32768)]
    if sizes != want:
        fail(f"-np {ranks}: sizes {sizes}, expected {want}")
    if ranks > 1 and f"mpi on {ranks} rank(s)" not in text:
        fail(f"-np {ranks}: the header does not name MPI and the ranks:\n{text}")
    print(f"bench comm -np {ranks}: 24 rows, sizes and bus bandwidths as nccl-tests defines them")

# The peer's figures come back beside ours, with the ratio (a peer file as comm_peer.py writes it).
ours = read_jsonl(os.path.join(tmp, "comm2.jsonl"))
peer = os.path.join(tmp, "peer.jsonl")
with open(peer, "w") as f:
    for r in ours:
        f.write(json.dumps({"impl": "pytorch", "collective": r["collective"], "dtype": r["dtype"], "bytes": r["bytes"],
                            "ranks": 2, "busbw_gbps": 0.5}) + "\n")
out = os.path.join(tmp, "ratio.jsonl")
text = run(2, "bench", "comm", "--device", "cpu", "--min-bytes", "8K", "--max-bytes", "8K", "--warmup", "1",
           "--iters", "2", "--dtypes", "f32", "--collectives", "all_reduce", "--peer", peer, "--json", out)
rows = read_jsonl(out)
if len(rows) != 1 or abs(rows[0]["ratio"] - rows[0]["busbw_gbps"] / 0.5) > 1e-9 or "ours/peer" not in text:
    fail(f"the peer's ratio is missing or wrong: {rows}\n{text}")
print("bench comm --peer: the peer's busbw and the ratio printed and written")

# `vlm bench train` on CPU ranks (the tiny model, fp32): a world of one is the baseline of two ranks under each
# strategy. Per-rank and total figures add up, tokens are samples x the sequence, the efficiency is total over
# ranks x baseline, FSDP's measured memory matches its formula (within 10%, as fsdp_test.py), and full_shard keeps
# half of the world of one's weights, gradients and moments on each of two ranks.
TRAIN = ["bench", "train", "--device", "cpu", "--preset", "tiny", "--batch", "2", "--text-tokens", "16", "--steps", "2",
         "--warmup", "1"]
single = os.path.join(tmp, "train1.json")
run(0, *TRAIN, "--json", single)
base = read_jsonl(single)[0]
if base["world_size"] != 1 or base["seq_len"] != 16 + 16 or len(base["ranks"]) != 1:
    fail(f"world of one: {base}")
# The FSDP2 peer's line for this preset and world size (as fsdp2_peer.py writes it; one for another world size that
# must be ignored) gives the ratio of total tokens/s.
train_peer = os.path.join(tmp, "fsdp2.jsonl")
with open(train_peer, "w") as f:
    for world, tokens in ((1, 50.0), (2, 100.0)):
        f.write(json.dumps({"impl": "pytorch-fsdp2", "preset": "tiny", "world_size": world, "batch_per_rank": 2,
                            "seq_len": 32, "tokens_per_s": tokens, "peak_gb_max": 0.1}) + "\n")
for strategy in ("no_shard", "shard_grad_op", "full_shard"):
    out = os.path.join(tmp, f"train2_{strategy}.json")
    text = run(2, *TRAIN, "--fsdp", strategy, "--baseline-json", single, "--peer", train_peer, "--json", out)
    j = read_jsonl(out)[0]
    if abs(j["ratio_to_peer"] - j["tokens_per_s"] / 100.0) > 1e-9 or "ours / peer" not in text:
        fail(f"{strategy}: the FSDP2 peer's ratio is missing or wrong: {j.get('ratio_to_peer')}\n{text}")
    ranks = j["ranks"]
    if j["world_size"] != 2 or [r["rank"] for r in ranks] != [0, 1]:
        fail(f"{strategy}: ranks {j}")
    total = sum(r["samples_per_s"] for r in ranks)
    if abs(j["samples_per_s"] - total) > 1e-9 * total or abs(j["tokens_per_s"] - total * j["seq_len"]) > 1e-6 * total:
        fail(f"{strategy}: totals do not add up: {j}")
    if abs(j["scaling_efficiency"] - total / (2 * base["samples_per_s"])) > 1e-9:
        fail(f"{strategy}: efficiency {j['scaling_efficiency']}, expected total / (2 x baseline)")
    for r in ranks:
        if not (r["loss"] > 0) or r["peak_gb"] <= 0:
            fail(f"{strategy}: rank {r['rank']}: loss or peak memory missing: {r}")
        for cat, f in r["fsdp_memory_formula"].items():
            m = r["fsdp_memory"][cat]
            if abs(m - f) > 0.1 * f:
                fail(f"{strategy}: rank {r['rank']}: {cat} measured {m}, formula {f}")
    one, two = base["ranks"][0]["fsdp_memory"], ranks[0]["fsdp_memory"]
    for cat in ("parameters", "gradients", "optimizer"):
        want = one[cat] if strategy == "no_shard" else one[cat] / 2
        if abs(two[cat] - want) > 0.01 * one[cat]:
            fail(f"{strategy}: rank 0 keeps {two[cat]} bytes of {cat}, expected about {want} (world of one {one[cat]})")
    for want in ("weak scaling efficiency", "total", "2 rank(s) (mpi, cpu)"):
        if want not in text:
            fail(f"{strategy}: '{want}' not printed:\n{text}")
    print(f"bench train -np 2 {strategy}: per-rank and total figures, efficiency {j['scaling_efficiency']:.2f}, "
          f"memory as the formula")

p = subprocess.run([vlm, *TRAIN, "--baseline-json", os.path.join(tmp, "comm0.jsonl")], capture_output=True, text=True)
if p.returncode == 0 or "--baseline-json" not in p.stderr:
    fail(f"a baseline that is not a training result was accepted: {p.stderr}")
p = subprocess.run([vlm, *TRAIN, "--fsdp", "half_shard"], capture_output=True, text=True)
if p.returncode != 2 or "--fsdp" not in p.stderr:
    fail(f"--fsdp half_shard: exit {p.returncode}, {p.stderr}")
print("PASS")
