#!/usr/bin/env python3
"""Seeded kill -9 harness for `vlm train --resume`.

Trains the shapes data on a tiny model once without interruption, then again while killing the process with SIGKILL
at random moments: any time, inside a checkpoint write (its ".tmp" folder exists), right after a checkpoint's rename,
and inside a prune (a ".pruning" folder exists). VLM_TEST_CHECKPOINT_DELAY_MS makes those windows long enough to
hit. After every kill, each folder that looks like a checkpoint (step_XXXXXXXX) must be complete; the next start
resumes. At the end every logged loss must equal the uninterrupted run's, step for step (the same text in
metrics.jsonl), with no step logged twice and no leftover folders.

usage: kill_resume_test.py VLM_BINARY WORK_DIR [--seed S] [--kills N]
Exit 0 on success, 1 on a mismatch (the details on stderr).
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time

STEPS = 120
CONFIG = """
[model]
preset = "tiny"
vision.image_size = 16
vision.patch_size = 4
vision.hidden = 16
vision.layers = 1
vision.heads = 2
vision.mlp_hidden = 32
projector.pixel_shuffle = 2
text.vocab_size = 300
text.hidden = 32
text.layers = 1
text.heads = 4
text.kv_heads = 2
text.intermediate = 48
text.max_seq_len = 256

[data]
train_shards = "{data}/train"
tokenizer = "{data}/tokenizer.json"
task = "mixed"
max_turns = 3
decode_threads = 1
prefetch_batches = 2

[train]
steps = {steps}
batch_size = 4
grad_accum = 2
warmup_steps = 5
lr = 3e-3
threads = 1
log_every = 1
ckpt_every = 3
keep_last = 2
"""


def die(msg):
    print("kill_resume_test: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        die("%s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def losses(run_dir):
    """step -> the loss as written (text), from metrics.jsonl; a step logged twice is an error."""
    out = {}
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if rec.get("kind", "train") != "train" or "loss" not in rec:
                continue
            step = rec["step"]
            if step in out:
                die("%s: step %d logged twice" % (path, step))
            out[step] = repr(rec["loss"])
    return out


def safetensors_ok(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "shorter than its header length"
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            return "header cut off"
        header = json.loads(f.read(n))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        return "%d bytes, the header needs %d" % (size, 8 + n + end)
    return None


def check_checkpoints(ckpt_dir, context):
    """Every step_XXXXXXXX folder is a complete checkpoint (the manifest's sizes, parsable files, its step)."""
    if not os.path.isdir(ckpt_dir):
        return
    for name in sorted(os.listdir(ckpt_dir)):
        if len(name) != 13 or not name.startswith("step_") or not name[5:].isdigit():
            continue
        d = os.path.join(ckpt_dir, name)
        for f in ("model.safetensors", "optimizer.safetensors", "trainer_state.json", "manifest.json"):
            if not os.path.isfile(os.path.join(d, f)):
                die("%s: %s lacks %s: a torn checkpoint" % (context, d, f))
        with open(os.path.join(d, "manifest.json")) as f:
            for fname, size in json.load(f)["files"].items():
                if os.path.getsize(os.path.join(d, fname)) != size:
                    die("%s: %s/%s differs from its manifest" % (context, d, fname))
        for f in ("model.safetensors", "optimizer.safetensors"):
            bad = safetensors_ok(os.path.join(d, f))
            if bad:
                die("%s: %s/%s: %s" % (context, d, f, bad))
        with open(os.path.join(d, "trainer_state.json")) as f:
            if json.load(f)["step"] != int(name[5:]):
                die("%s: %s: trainer_state.json of another step" % (context, d))


def wait_for(predicate, proc, timeout):
    """Polls every 2 ms until predicate() or the process ends; True when predicate() held."""
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.002)
    return False


def has_suffix(ckpt_dir, suffix, since):
    """A folder ending in `suffix` made (or renamed) by this process: changed after `since`, so a leftover of the
    previous kill (removed by this start) does not count."""
    try:
        for n in os.listdir(ckpt_dir):
            if n.endswith(suffix) and os.stat(os.path.join(ckpt_dir, n)).st_ctime >= since:
                return True
    except FileNotFoundError:
        pass
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vlm")
    ap.add_argument("work")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--kills", type=int, default=24)
    ap.add_argument("--delay-ms", type=int, default=40)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    shutil.rmtree(a.work, ignore_errors=True)
    data = os.path.join(a.work, "data")
    run([a.vlm, "data", "synth", "shapes", "--out", data + "/train", "--samples", "160", "--image-size", "16",
         "--shard-size", "40", "--seed", "1"])
    run([a.vlm, "data", "tokenizer-train", "--shards", data + "/train", "--out", data + "/tokenizer.json",
         "--vocab-size", "300", "--template", "chat"])
    config = os.path.join(a.work, "run.toml")
    with open(config, "w") as f:
        f.write(CONFIG.format(data=data, steps=STEPS))
    env = dict(os.environ)
    env.pop("VLM_TEST_CHECKPOINT_DELAY_MS", None)

    t0 = time.time()
    ref_dir = os.path.join(a.work, "reference")
    run([a.vlm, "train", "--config", config, "--run-dir", ref_dir, "--quiet"], env=env)
    ref_seconds = time.time() - t0
    ref = losses(ref_dir)
    if sorted(ref) != list(range(1, STEPS + 1)):
        die("the reference run logged steps %s" % sorted(ref)[:10])

    env["VLM_TEST_CHECKPOINT_DELAY_MS"] = str(a.delay_ms)
    kills = {"any": 0, "ckpt_write": 0, "after_rename": 0, "prune": 0}
    episode = 0
    total_kills = 0
    while total_kills < a.kills:
        episode += 1
        run_dir = os.path.join(a.work, "killed%d" % episode)
        ckpt_dir = os.path.join(run_dir, "checkpoints")
        starts = 0
        while True:
            starts += 1
            if starts > 20 * a.kills:
                die("no progress after %d starts" % starts)
            cmd = [a.vlm, "train", "--config", config, "--run-dir", run_dir, "--quiet", "--resume"]
            log = open(os.path.join(a.work, "episode%d.log" % episode), "a")
            started = time.time() - 0.01
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            mode = rng.choice(["any", "any", "ckpt_write", "after_rename", "prune"]) if total_kills < a.kills else None
            hit = False
            if mode == "any":
                hit = not wait_for(lambda: False, proc, rng.uniform(0.05, max(0.3, ref_seconds)))
            elif mode == "ckpt_write":
                hit = wait_for(lambda: has_suffix(ckpt_dir, ".tmp", started), proc, 60)
                time.sleep(rng.uniform(0, a.delay_ms / 1000.0))
            elif mode == "after_rename":
                # The rename happened when a step folder newer than `latest` names exists; then the second pause.
                def renamed():
                    try:
                        with open(os.path.join(ckpt_dir, "latest")) as f:
                            latest = f.read().strip()
                    except FileNotFoundError:
                        latest = ""
                    names = [n for n in os.listdir(ckpt_dir) if len(n) == 13] if os.path.isdir(ckpt_dir) else []
                    return any(n > latest for n in names)
                hit = wait_for(renamed, proc, 60)
            elif mode == "prune":
                hit = wait_for(lambda: has_suffix(ckpt_dir, ".pruning", started), proc, 60)
                time.sleep(rng.uniform(0, a.delay_ms / 1000.0))
            if mode is not None and proc.poll() is None and hit:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                log.close()
                kills[mode] += 1
                total_kills += 1
                check_checkpoints(ckpt_dir, "after kill %d (%s)" % (total_kills, mode))
                continue
            code = proc.wait()
            log.close()
            if code != 0:
                with open(os.path.join(a.work, "episode%d.log" % episode)) as f:
                    die("vlm train exited %d in episode %d:\n%s" % (code, episode, f.read()[-3000:]))
            break  # the run finished
        got = losses(run_dir)
        if got != ref:
            diff = [s for s in range(1, STEPS + 1) if got.get(s) != ref.get(s)]
            die("episode %d: losses differ from the uninterrupted run at steps %s (first: %s vs %s)" %
                (episode, diff[:10], got.get(diff[0]), ref.get(diff[0])))
        left = [n for n in os.listdir(ckpt_dir) if n.endswith(".tmp") or n.endswith(".pruning")]
        if left:
            die("episode %d: leftovers after the run: %s" % (episode, left))
        print("episode %d: %d starts, every one of %d losses equal to the uninterrupted run" % (episode, starts, STEPS))
    print("kill_resume_test: %d kills (%s), seed %d, %.0f s: OK" %
          (total_kills, ", ".join("%s %d" % kv for kv in kills.items()), a.seed, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
