"""What the FSDP tests over MPI share (fsdp_test.py, fsdp_schedule_test.py): running fsdp_driver under mpirun, a
run's train losses, one process's reference losses and their comparison within a tolerance."""
import json
import os
import subprocess
import sys


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


class FsdpMpi:
    def __init__(self, driver, tmp, data):
        self.driver, self.tmp, self.data = driver, tmp, data

    def mpi(self, np, *args, timeout=120, env=None):
        """fsdp_driver ARGS under mpirun -np NP; exits 77 (skipped) when vlm_dist was built without MPI."""
        cmd = ["mpirun", "-np", str(np), "--oversubscribe", "--allow-run-as-root", self.driver, *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if p.returncode != 0 and "built without MPI" in p.stdout + p.stderr:
            print("vlm_dist built without MPI: skipped")
            sys.exit(77)
        return p

    def train(self, np, name, strategy, steps, accum, *extra):
        run = os.path.join(self.tmp, name)
        p = self.mpi(np, "train", self.data, run, strategy, str(steps), str(accum), *extra)
        if p.returncode != 0:
            print(p.stdout, p.stderr)
            fail(f"{name}: mpirun -np {np} {strategy} {' '.join(extra)}")
        return run

    def reference(self, np, steps, accum):
        out = subprocess.run([self.driver, "reference", self.data, str(np), str(steps), str(accum)],
                             capture_output=True, text=True, check=True).stdout
        return [(int(a), float(b)) for a, b in (l.split() for l in out.splitlines())]


def losses(run):
    out = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and r.get("kind", "train") == "train":
                out.append((r["step"], r["loss"]))
    return out


def compare(what, got, want, tol):
    """Fails unless the (step, loss) lists agree within relative `tol` (0: exactly); returns the largest difference."""
    if len(got) != len(want):
        fail(f"{what}: {len(got)} losses, expected {len(want)}")
    worst = max(abs(g[1] - w[1]) / abs(w[1]) for g, w in zip(got, want))
    if tol == 0 and got != want:
        fail(f"{what}: not exact (max relative difference {worst:.3g})\n{list(zip(got, want))}")
    if worst > tol:
        fail(f"{what}: max relative difference {worst:.3g} > {tol}")
    print(f"{what}: {'exact' if got == want else f'max relative difference {worst:.2g} (tolerance {tol})'}")
    return worst
