#!/usr/bin/env python3
"""Summarizes the output of dev/gpu/gpu_ab.sh: per benchmark row, the median of each side's rounds and new / old.

    dev/gpu/gpu_ab.sh OLD NEW ARGS... | python3 dev/gpu/ab_summary.py [FILE]

Rows it reads (others are ignored): `vlm bench attention` rows ("d=128 causal=1 s= 2048 ... fwd 480.1 bwd 455.0
fwd+bwd 461.2 TFLOP/s ...": TFLOP/s, higher is better) and the `vlm bench train` result row ("vlm.cpp bf16 1458.9
43.87 ...": samples/s and step ms). Sections start at gpu_ab.sh's "== round R, old|new: ..." lines. Prints one line per
row and metric: old median, new median, new / old (for step ms, old / new, so > 1 always means the new side is
faster), and the rounds each side contributed. gpu_ab.sh's AB_VARIANTS sections ("new[VLM_X=1]") each get their own
line against the same old side, the row named with the variant ("train bf16 [VLM_X=1]"). Exit status 1 when no row
was found or a row has only one side.
"""
import re
import statistics
import sys

SECTION = re.compile(r"^== round (\d+), (old|new(?:\[[^\]]*\])?):")
ATTENTION = re.compile(
    r"^d=\s*(\d+) causal=(\d) s=\s*(\d+) .*?\bfwd\s+([\d.]+)\s+bwd\s+([\d.]+)\s+fwd\+bwd\s+([\d.]+) TFLOP/s")
TRAIN = re.compile(r"^vlm\.cpp (\S+)\s+([\d.]+)\s+([\d.]+)\s")


def parse(lines):
    """{(row, metric): {"old": [values], "new": [values], "new[X]": [...]}} in first-seen order, and whether a metric
    is a time."""
    table, is_time, side = {}, {}, None
    for n, line in enumerate(lines, 1):
        m = SECTION.match(line)
        if m:
            side = m.group(2)
            continue
        rows = []
        m = ATTENTION.match(line)
        if m:
            d, causal, s, fwd, bwd, both = m.groups()
            key = f"d={d} causal={causal} s={s}"
            rows = [(key, "fwd", fwd, False), (key, "bwd", bwd, False), (key, "fwd+bwd", both, False)]
        m = TRAIN.match(line)
        if m:
            precision, sps, step_ms = m.groups()
            rows = [(f"train {precision}", "samples/s", sps, False), (f"train {precision}", "step ms", step_ms, True)]
        if rows and side is None:
            raise ValueError(f"line {n}: a benchmark row before any '== round R, old|new:' line")
        for key, metric, value, time in rows:
            table.setdefault((key, metric), {"old": [], "new": []}).setdefault(side, []).append(float(value))
            is_time[(key, metric)] = time
    return table, is_time


def main(argv):
    path = argv[1] if len(argv) > 1 else None
    try:
        with (open(path) if path else sys.stdin) as f:
            table, is_time = parse(f.read().splitlines())
    except (OSError, ValueError) as e:
        print(f"ab_summary: {e}", file=sys.stderr)
        return 1
    if not table:
        print("ab_summary: no benchmark rows (bench attention's 'd=... fwd ... bwd ...' or bench train's 'vlm.cpp ...')",
              file=sys.stderr)
        return 1
    status = 0
    print(f"{'row':<26} {'metric':<10} {'old':>9} {'new':>9} {'new/old':>8}  rounds")
    for (key, metric), sides in table.items():
        old = sides["old"]
        for label, new in sides.items():
            if label == "old" or (label == "new" and not new and len(sides) > 2):
                continue  # (only variants ran beside the old side)
            name = key if label == "new" else f"{key} [{label[4:-1]}]"
            if not old or not new:
                print(f"{name:<26} {metric:<10}  only the {'new' if new else 'old'} side ran")
                status = 1
                continue
            mo, mn = statistics.median(old), statistics.median(new)
            ratio = (mo / mn if is_time[(key, metric)] else mn / mo) if mo > 0 and mn > 0 else float("nan")
            print(f"{name:<26} {metric:<10} {mo:9.1f} {mn:9.1f} {ratio:7.3f}x  {len(old)}/{len(new)}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
