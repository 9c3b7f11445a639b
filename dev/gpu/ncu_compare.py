#!/usr/bin/env python3
"""Side-by-side headline metrics of the kernels in a raw.csv written by dev/gpu/gpu_ncu_full.sh, and the SASS
instructions of a source-page CSV that gather the most stall samples.

  dev/gpu/ncu_compare.py RAW_CSV [--grep REGEX ...] [--sass SASS_CSV [--top N]]

Without --grep it prints a fixed list (duration, clocks, throughputs, pipe utilizations, issue and stall
breakdown, occupancy, registers, shared memory); each --grep adds every metric whose name matches.
"""
import argparse
import csv
import re
import sys

HEADLINE = [
    r"^Kernel Name$", r"^gpu__time_duration\.sum$", r"^sm__cycles_elapsed\.avg\.per_second$",
    r"^launch__grid_size$", r"^launch__block_size$", r"^launch__registers_per_thread$",
    r"^launch__shared_mem_per_block_dynamic$", r"^sm__warps_active\.avg\.pct_of_peak_sustained_active$",
    r"^sm__throughput\.avg\.pct_of_peak_sustained_elapsed$",
    r"^gpu__compute_memory_throughput\.avg\.pct_of_peak_sustained_elapsed$",
    r"^dram__bytes_read\.sum$", r"^dram__bytes_write\.sum$", r"^lts__t_sector_hit_rate\.pct$",
    r"^sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$",
    r"^sm__pipe_.*tensor.*cycles_active\.avg\.pct_of_peak_sustained_active$",
    r"^smsp__issue_active\.avg\.pct_of_peak_sustained_active$",
    r"^smsp__inst_executed\.sum$",
    r"^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$",
    r"^l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*\.sum$",
    r"^smsp__sass_inst_executed_op_shared_(ld|st)\.sum$",
]


def load_raw(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, units, data = rows[0], rows[1], rows[2:]
    return header, units, data


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("raw")
    p.add_argument("--grep", action="append", default=[])
    p.add_argument("--sass")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    header, units, data = load_raw(args.raw)
    patterns = [re.compile(x) for x in (args.grep or HEADLINE)]
    tags = [row[0] for row in data]
    print("metric".ljust(72) + "".join(t[:24].rjust(26) for t in tags))
    for i, name in enumerate(header):
        if i == 0 or not any(pt.search(name) for pt in patterns):
            continue
        vals = [row[i] if i < len(row) else "" for row in data]
        if all(v in ("", "n/a") for v in vals):
            continue
        if name.startswith("smsp__average_warps_issue_stalled") and all(_num(v) < 0.05 for v in vals):
            continue  # stall reasons that no kernel has
        label = f"{name} [{units[i]}]" if units[i] else name
        print(label[:72].ljust(72) + "".join(v[:24].rjust(26) for v in vals))
    if args.sass:
        top_sass(args.sass, args.top)
    return 0


def _num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def top_sass(path, top):
    """The source page's CSV: one row per SASS instruction with sampling columns; sort by the total samples."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" == c for c in r)), 0)
    header, body = rows[start], rows[start + 1:]
    samp = [i for i, h in enumerate(header) if "Sampling" in h and "All" in h] or \
           [i for i, h in enumerate(header) if "Sampl" in h]
    src = next((i for i, h in enumerate(header) if h == "Source"), 1)
    if not samp:
        print("no sampling column in", path, "; columns:", header[:20])
        return
    col = samp[0]
    total = sum(_num(r[col]) for r in body if len(r) > col)
    print(f"\n{path}: {len(body)} instructions, {total:.0f} samples in '{header[col]}'; top {top}:")
    stall_cols = [i for i, h in enumerate(header) if h.startswith("stall_") or "Stall" in h]
    for r in sorted(body, key=lambda r: -_num(r[col]) if len(r) > col else 0)[:top]:
        extra = ", ".join(f"{header[i]}={r[i]}" for i in stall_cols if i < len(r) and _num(r[i]) > 0)[:160]
        print(f"{_num(r[col]) / max(total, 1) * 100:5.1f}%  {r[src][:70]:70s} {extra}")


if __name__ == "__main__":
    sys.exit(main())
