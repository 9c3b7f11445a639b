#!/usr/bin/env python3
"""FSDP on the CPU over MPI (mpirun -np 1..4, the tiny model of the test fixture).

Parity: each strategy's 20 losses against one process that reads the same ranks' samples and sums the ranks'
gradients in rank order (fsdp_driver reference). Exact (the same doubles) where the reduction order is the same:
one or two ranks (a + b == b + a in floating point). With 3 or 4 ranks MPI chooses the association of the sums
((a + b) + c or a + (b + c)), which changes fp32 gradients by an ulp or so (~1e-7 relative); 20 AdamW steps carry
that into the losses at ~1e-8 relative (measured: 7.8e-9), so those must agree within REL_TOL = 1e-6, 100 times
the measured drift and far below what a wrong shard, a missing reduction or a double-counted gradient does (1e-3
and more by the second step). Gradient accumulation (a reduce-scatter per micro-batch instead of one sum) and bf16
gradient reduction change the rounding, not the maths: accumulation within REL_TOL as well (measured 6e-9); bf16
gradients on the wire keep 8 significant bits (2^-9 relative rounding per element, averaged out over the
elements and damped by AdamW's normalized update), measured 1e-4 relative on the losses: within 1e-3.
Also: freezing and block recomputation compose with full_shard (equal to no_shard's losses bit for bit); a
checkpoint written by 4 ranks under full_shard is resharded 4 -> 2 (shard_grad_op) -> 3 (full_shard) -> 1
(no_shard) and its weights, moments and step come back bit for bit; `vlm convert` reads the sharded run; a run
resumed under another strategy continues the uninterrupted losses exactly; a rank killed with SIGKILL ends the job
within the timeout with mpirun's report naming the rank, and leaves no checkpoint half written.
Exits 77 (skipped) without mpirun or an MPI build.
usage: fsdp_test.py FSDP_DRIVER VLM
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from fsdp_mpi import FsdpMpi, compare, fail, losses

REL_TOL = 1e-6
driver, vlm = sys.argv[1], sys.argv[2]
if shutil.which("mpirun") is None:
    print("mpirun not found: skipped")
    sys.exit(77)
tmp = tempfile.mkdtemp()
data = os.path.join(tmp, "data")
STRATEGIES = ["no_shard", "shard_grad_op", "full_shard"]


runner = FsdpMpi(driver, tmp, data)
mpi, train, reference = runner.mpi, runner.train, runner.reference


subprocess.run([driver, "prepare", data], check=True)
t0 = time.time()
for np in (1, 2, 3, 4):
    ref = reference(np, 20, 1)
    for s in STRATEGIES:
        run = train(np, f"p{np}_{s}", s, 20, 1)
        compare(f"-np {np} {s}", losses(run), ref, 0 if np <= 2 else REL_TOL)

compare("-np 2 full_shard, 2 micro-batches a step", losses(train(2, "accum", "full_shard", 20, 2)),
        reference(2, 20, 2), REL_TOL)
compare("-np 2 full_shard, bf16 gradient reduction", losses(train(2, "bf16", "full_shard", 20, 1, "reduce=bf16")),
        reference(2, 20, 1), 1e-3)
frozen = [losses(train(2, f"frozen_{s}", s, 10, 1, "freeze=vision", "recompute")) for s in ("no_shard", "full_shard")]
compare("-np 2 full_shard with vision frozen and blocks recomputed, against no_shard", frozen[1], frozen[0], 0)
tied = [losses(train(2, f"tied_{s}", s, 10, 1, "tied")) for s in ("no_shard", "full_shard")]
compare("-np 2 full_shard with the LM head tied to the embeddings, against no_shard", tied[1], tied[0], 0)

# Memory per rank (memory.json, first step): every category measured from the buffers the rank holds, against the
# formula computed here from the units' sizes alone (docs/fsdp.md), within 10%.
def memory_formula(units, strategy, world, accum, bf16_reduce):
    cats = dict.fromkeys(["parameters", "compute_copies", "gradients", "optimizer", "gathered_weights_peak",
                          "gradient_buffers_peak", "communication_buffers_peak"], 0)
    if strategy == "no_shard":
        n = sum(u["numel"] for u in units)
        cats.update(parameters=4 * n, gradients=4 * n, optimizer=8 * sum(u["numel"] for u in units if u["trainable"]))
        return cats
    shard = {u["name"]: u["padded"] // world for u in units}
    trainable = [u for u in units if u["trainable"]]
    cats["parameters"] = 4 * sum(shard.values())
    cats["gradients"] = 4 * sum(shard[u["name"]] for u in trainable)
    cats["optimizer"] = 8 * sum(shard[u["name"]] for u in trainable)
    padded = {u["name"]: u["padded"] for u in units}
    if strategy == "shard_grad_op":
        cats["gathered_weights_peak"] = 4 * sum(padded.values())
    else:  # full_shard with prefetch: a unit and the next one the forward or the backward reads
        names = [u["name"] for u in units]
        order = names + [n for n in reversed(names) if n not in ("text.lm_head", "text.embed_tokens")]
        cats["gathered_weights_peak"] = 4 * max(padded[a] + padded[b] for a, b in zip(order, order[1:]))
    # Reductions end in backward order, one in flight over the next unit's backward: consecutive pairs.
    back = [u for u in reversed(units) if u["trainable"]]
    pairs = list(zip(back, back[1:])) or [(back[0], None)]
    def pair_max(f):
        return max(f(a) + (f(b) if b else 0) for a, b in pairs)
    P = lambda u: u["padded"]
    S = lambda u: u["padded"] // world
    if bf16_reduce:
        cats["gradient_buffers_peak"] = 4 * max(P(u) for u in trainable)
        cats["communication_buffers_peak"] = pair_max(lambda u: 2 * P(u) + 2 * S(u)) + \
            (4 * max(S(u) for u in trainable) if accum > 1 else 0)
    else:
        cats["gradient_buffers_peak"] = pair_max(lambda u: 4 * P(u))
        if accum > 1:
            cats["communication_buffers_peak"] = pair_max(lambda u: 4 * S(u))
    return cats


def check_memory(name, strategy, world, accum=1, bf16_reduce=False):
    mem = json.load(open(os.path.join(tmp, name, "memory.json")))["fsdp"]
    if len(mem["ranks"]) != world:
        fail(f"{name}/memory.json: {len(mem['ranks'])} ranks")
    want = memory_formula(mem["units"], strategy, world, accum, bf16_reduce)
    for rank in mem["ranks"]:
        for cat, f in want.items():
            m = rank["measured"][cat]
            if abs(m - f) > 0.1 * f:
                fail(f"{name}/memory.json rank {rank['rank']}: {cat} {m} bytes, the formula {f}")
    return sum(want.values())


for np in (2, 4):
    totals = {s: check_memory(f"p{np}_{s}", s, np) for s in STRATEGIES}
    print(f"-np {np} memory per rank within 10% of the formula: " +
          ", ".join(f"{s} {t / 1024:.0f} KiB" for s, t in totals.items()))
check_memory("accum", "full_shard", 2, accum=2)
check_memory("bf16", "full_shard", 2, bf16_reduce=True)

# Resharding: the 4-rank full_shard run's final checkpoint through 4 -> 2 -> 3 -> 1, bit for bit.
def dump(ckpt):
    return subprocess.run([driver, "dump", ckpt], capture_output=True, text=True, check=True).stdout

src = os.path.join(tmp, "p4_full_shard", "checkpoints", "step_00000020")
chain = [(2, "shard_grad_op"), (3, "full_shard"), (1, "no_shard")]
at = src
for np, s in chain:
    dst = os.path.join(tmp, f"reshard{np}")
    p = mpi(np, "reshard", data, at, dst, s)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail(f"reshard onto {np} ranks ({s})")
    at = os.path.join(dst, "checkpoints", "step_00000020")
if dump(at) != dump(src):
    fail("4 -> 2 -> 3 -> 1 changed the weights or optimizer state")
if not os.path.exists(os.path.join(at, "model.safetensors")):
    fail("the 1-rank no_shard checkpoint is not in the replicated layout")
print("reshard 4 (full_shard) -> 2 (shard_grad_op) -> 3 (full_shard) -> 1 (no_shard): weights, moments and step "
      "bit for bit")

out = os.path.join(tmp, "hf")
p = subprocess.run([vlm, "convert", os.path.join(tmp, "p4_full_shard"), "--to", "hf", "--out", out],
                   capture_output=True, text=True)
if p.returncode != 0 or not os.path.exists(os.path.join(out, "model.safetensors")):
    print(p.stdout, p.stderr)
    fail("vlm convert of a sharded run")
print("vlm convert --to hf reads the 4-rank sharded checkpoint")

# The training run itself through 4 -> 2 -> 3 -> 1 ranks (and strategies), a checkpoint every 5 steps: the same 20
# losses as the uninterrupted 4-rank run (within REL_TOL: each world size sums in its own order) and, at the end,
# every data stream at the same position (bit for bit: the same samples were read).
chain_run = None
for np, s, extra in [(4, "full_shard", ["stop=5"]), (2, "shard_grad_op", ["resume", "stop=10"]),
                     (3, "full_shard", ["resume", "stop=15"]), (1, "no_shard", ["resume"])]:
    chain_run = train(np, "chain", s, 20, 1, "ckpt=5", *extra)
compare("training resumed 4 (full_shard) -> 2 (shard_grad_op) -> 3 (full_shard) -> 1 (no_shard)", losses(chain_run),
        losses(os.path.join(tmp, "p4_full_shard")), REL_TOL)
def streams(run):
    j = json.load(open(os.path.join(run, "checkpoints", "step_00000020", "trainer_state.json")))
    return j["data_streams"], j["stream_loader_states"], j["samples_seen"], j["tokens_seen"]
if streams(chain_run) != streams(os.path.join(tmp, "p4_full_shard")):
    fail("the resharded run's data streams are not where the uninterrupted run's are")
print("resharded training: the 4 data streams end at the uninterrupted run's positions, bit for bit")

# Another strategy on resume, same world size: exact.
stopped = train(2, "resumed", "full_shard", 20, 1, "stop=10", "ckpt=5")
train(2, "resumed", "shard_grad_op", 20, 1, "resume")
compare("-np 2 full_shard stopped at 10, resumed under shard_grad_op", losses(stopped), losses(
    os.path.join(tmp, "p2_full_shard")), 0)

# kill -9 of one rank mid-run, with checkpoints every step and a pause inside each write.
run = os.path.join(tmp, "killed")
pids = os.path.join(tmp, "pids")
os.makedirs(pids)
env = dict(os.environ, FSDP_TEST_PID_DIR=pids, VLM_TEST_CHECKPOINT_DELAY_MS="150")
cmd = ["mpirun", "-np", "3", "--oversubscribe", "--allow-run-as-root", driver, "train", data, run, "full_shard",
       "400", "1", "ckpt=1"]
job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
deadline = time.time() + 60
while time.time() < deadline and not os.path.isdir(os.path.join(run, "checkpoints", "step_00000003")):
    time.sleep(0.05)
victim = int(open(os.path.join(pids, "rank1")).read())
os.kill(victim, signal.SIGKILL)
t_kill = time.time()
try:
    output, _ = job.communicate(timeout=60)
except subprocess.TimeoutExpired:
    job.kill()
    fail("the job did not end within 60 s of a rank's SIGKILL")
if job.returncode == 0:
    fail("the job succeeded although rank 1 was killed")
if "rank 1" not in output or "signal 9" not in output:
    print(output)
    fail("no report naming the killed rank")
print(f"rank 1 killed: the job ended {time.time() - t_kill:.1f} s later, exit status {job.returncode}")
ckdir = os.path.join(run, "checkpoints")
complete = 0
for name in sorted(os.listdir(ckdir)):
    d = os.path.join(ckdir, name)
    if not os.path.isdir(d) or not name.startswith("step_") or "." in name:
        continue
    index = json.load(open(os.path.join(d, "fsdp_index.json")))
    manifest = json.load(open(os.path.join(d, "manifest.json")))["files"]
    for f in index["files"] + ["trainer_state.json"]:
        if manifest.get(f) != os.path.getsize(os.path.join(d, f)):
            fail(f"{d}: {f} is not complete")
    complete += 1
if complete < 3:
    fail(f"only {complete} checkpoints were written before the kill")
print("every checkpoint folder left is complete (the interrupted one, if any, is a .tmp folder)")
newest = max(int(n[5:]) for n in os.listdir(ckdir) if n.startswith("step_") and "." not in n)
train(3, "killed", "full_shard", 400, 1, "ckpt=1", "resume", f"stop={newest + 1}")
if any(n.endswith(".tmp") for n in os.listdir(ckdir)):
    fail("a staging folder survived the next start")
print(f"the run resumes from step {newest} on the same ranks; the interrupted write's staging folder is gone")
print(f"PASS: FSDP parity, resharding, convert, resume and kill ({time.time() - t0:.0f} s)")
shutil.rmtree(tmp)
