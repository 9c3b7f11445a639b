#!/usr/bin/env python3
"""The summary of dev/gpu/multi_gpu.sh: its JSON lines (multi_gpu.jsonl) as Markdown tables with the ratios.

comm: per world size, collective and dtype, our bus bandwidth and the PyTorch peer's (one rank: the algorithm
bandwidth, since its bus bandwidth is 0 by definition) at the largest size both ran, and the geometric mean of ours / peer over every size both ran. parity: each strategy's largest relative loss difference
against one device reading the same samples. scaling: per preset and world size, total and per-rank tokens/s, the
weak scaling efficiency (ours against the one-device step, the peer's against its own world of one), our ratio to
PyTorch FSDP2, peak memory per GPU beside the peer's, and FSDP's measured memory against its formula.
usage: multi_gpu_summary.py MULTI_GPU_JSONL   (Markdown on stdout)
"""
import json
import math
import sys
from collections import defaultdict


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return rows


def fmt(x, spec=".2f", suffix=""):
    return "—" if x is None else format(x, spec) + suffix


def size(b):
    return f"{b / 2**20:g} MiB" if b >= 2**20 else f"{b / 2**10:g} KiB"


def comm_table(rows):
    # One rank moves nothing between GPUs (busbw 0 by definition): its algbw, a copy's speed, is compared instead.
    def bw(r):
        return r["busbw_gbps"] if r["n"] > 1 else r["algbw_gbps"]
    ours = {(r["n"], r["collective"], r["dtype"], r["bytes"]): bw(r) for r in rows if r.get("impl") == "vlm.cpp"}
    peer = {(r["n"], r["collective"], r["dtype"], r["bytes"]): bw(r) for r in rows if r.get("impl") == "pytorch"}
    groups = defaultdict(list)
    for key in ours:
        groups[key[:3]].append(key[3])
    out = ["## Collectives (bus bandwidth, GB/s; one rank: algorithm bandwidth)", "",
           "| ranks | collective | dtype | largest size | ours | PyTorch | ours / PyTorch | geo-mean ratio over sizes |",
           "|---|---|---|---|---|---|---|---|"]
    for (n, what, dt), sizes in sorted(groups.items()):
        both = [b for b in sizes if (n, what, dt, b) in peer and peer[(n, what, dt, b)] > 0]
        big = max(both) if both else max(sizes)
        o, p = ours[(n, what, dt, big)], peer.get((n, what, dt, big))
        ratios = [ours[(n, what, dt, b)] / peer[(n, what, dt, b)] for b in both if ours[(n, what, dt, b)] > 0]
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        out.append(f"| {n} | {what} | {dt} | {size(big)} | {o:.2f} | {fmt(p)} | "
                   f"{fmt(o / p if p else None, suffix='x')} | {fmt(geo, suffix='x')} |")
    return out


def parity_table(rows):
    out = ["## Loss parity (FSDP on N ranks against one device reading the same samples)", "",
           "| ranks | strategy | steps | max relative difference | tolerance | final loss | result |",
           "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["n"], r["strategy"])):
        out.append(f"| {r['n']} | {r['strategy']} | {r['steps']} | {r['max_rel_diff']:.3g} | {r['tolerance']:g} | "
                   f"{fmt(r.get('final_loss'), '.5f')} | {'pass' if r['pass'] else 'FAIL'} |")
    return out


def scaling_table(rows):
    ours = {(r["preset"], r["n"]): r for r in rows if r.get("impl") == "vlm.cpp"}
    peer = {(r["preset"], r["n"]): r for r in rows if r.get("impl") == "pytorch-fsdp2"}
    out = ["## Weak scaling (per-rank batch fixed; tokens = every position, image and text)", "",
           "| preset | ranks | ours tokens/s | per rank | efficiency | FSDP2 tokens/s | FSDP2 efficiency | "
           "ours / FSDP2 | peak GB/GPU ours | FSDP2 | FSDP memory vs formula |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(set(ours) | set(peer)):
        o, p = ours.get(key), peer.get(key)
        p1 = peer.get((key[0], 1))
        p_eff = p["samples_per_s"] / (key[1] * p1["samples_per_s"]) if p and p1 else None
        per_rank = "/".join(f"{r['tokens_per_s']:.0f}" for r in o["ranks"]) if o else "—"
        ratio = o["tokens_per_s"] / p["tokens_per_s"] if o and p else None
        gap = o.get("memory_formula_max_rel_gap") if o else None
        out.append(f"| {key[0]} | {key[1]} | {fmt(o and o['tokens_per_s'], '.0f')} | {per_rank} | "
                   f"{fmt(o and o.get('scaling_efficiency'), '.1%')} | {fmt(p and p['tokens_per_s'], '.0f')} | "
                   f"{fmt(p_eff, '.1%')} | {fmt(ratio, suffix='x')} | {fmt(o and o.get('peak_gb_max'))} | "
                   f"{fmt(p and p.get('peak_gb_max'))} | {fmt(gap, '.1%') if gap is not None else '—'} |")
    return out


def main():
    rows = load(sys.argv[1])
    by_step = defaultdict(list)
    for r in rows:
        by_step[r.get("step")].append(r)
    lines = ["# Multi-GPU benchmark summary", ""]
    if not rows:
        lines.append("No measurements were recorded (see session.log).")
    if by_step["comm"]:
        lines += comm_table(by_step["comm"]) + [""]
    if by_step["parity"]:
        lines += parity_table(by_step["parity"]) + [""]
    if by_step["scaling"]:
        lines += scaling_table(by_step["scaling"]) + [""]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
