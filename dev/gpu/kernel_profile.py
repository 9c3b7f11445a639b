#!/usr/bin/env python3
"""Where one training step's GPU time goes, kernel by kernel, from an Nsight Compute CSV.

    ncu --csv --metrics gpu__time_duration.sum vlm bench train ... > kernels.csv
    dev/gpu/kernel_profile.py kernels.csv [--marker REGEX] [--top N]

ncu serializes the kernels, so each duration is the kernel alone on the GPU (no overlap with the side stream's weight
gradients): the sum over a step is the step's work, not its wall time. Launches are cut into steps at each launch
whose name matches --marker (default: the patch extraction that starts every training step's vision forward); the
last complete step (between the last two markers) is reported, or everything when fewer than two markers appear.
Prints the time per category (GEMM, attention, norms, ...) and the --top kernels by time with their call counts.
dev/gpu/gpu_kernel_profile.sh runs ncu and this on the GPU machine.

With --medians it prints instead each kernel's median duration over all launches, in order of first launch (kernels
whose median is under --min-us left out): the true per-kernel times of a benchmark, free of the host-side gaps that
event timings include (dev/gpu/gpu_flash.sh's `kernels` step compares ours and cuDNN's attention kernels so).
"""
import argparse
import collections
import csv
import re
import statistics
import sys

# (category, pattern on the kernel's name): the first match wins.
CATEGORIES = [
    ("gemm", r"nvjet|xmma|gemm|splitKreduce|cutlass"),
    ("attention backward", r"flash_bwd_sm90|flash_bwd_dkdv|flash_bwd_dq_kernel"),
    ("attention side kernels", r"flash_bwd_convert_dq|flash_bwd_dot_do_o|check_cu_seqlens"),
    ("attention forward", r"flash_fwd"),
    ("norm backward", r"norm_backward|column_partials|column_finish"),
    ("norm forward", r"norm_forward"),
    ("swiglu", r"swiglu"),
    ("optimizer", r"adamw|squares_partial|sum_partials"),
    ("qkv split + rope", r"qkv_split|rope"),
    ("cross-entropy", r"cross_entropy"),
    ("element-wise", r"map_kernel|add_rows|gelu"),
    ("layout", r"image_to_patches|patches_to_image|pixel_shuffle|pixel_unshuffle|gather_rows|scatter_rows"),
    ("embedding", r"embedding"),
]
UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}


def fail(message):
    sys.exit(f"kernel_profile: {message}")


def read_launches(path):
    """[(name, grid, microseconds)] in launch order, from ncu's --csv output (other lines are skipped)."""
    try:
        with open(path, newline="") as f:
            lines = [line for line in f if line.startswith('"')]  # ncu's own ==PROF== lines are not CSV rows
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    rows = list(csv.reader(lines))
    if not rows:
        fail(f"{path} has no CSV rows (was ncu run with --csv?)")
    header = rows[0]
    needed = ["Kernel Name", "Grid Size", "Metric Name", "Metric Unit", "Metric Value"]
    missing = [c for c in needed if c not in header]
    if missing:
        fail(f"{path}: header lacks {', '.join(missing)}")
    at = {c: header.index(c) for c in needed}
    launches = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) < len(header) or row[at["Metric Name"]] != "gpu__time_duration.sum":
            continue
        unit = row[at["Metric Unit"]]
        if unit not in UNIT_TO_US:
            fail(f"{path} row {line}: unknown time unit '{unit}'")
        try:
            value = float(row[at["Metric Value"]].replace(",", ""))
        except ValueError:
            fail(f"{path} row {line}: duration '{row[at['Metric Value']]}' is not a number")
        launches.append((row[at["Kernel Name"]], row[at["Grid Size"]], value * UNIT_TO_US[unit]))
    if not launches:
        fail(f"{path}: no gpu__time_duration.sum rows (ncu --metrics gpu__time_duration.sum)")
    return launches


def short_name(name):
    """The kernel's name without its parameter list, 'void ' and namespaces (ncu's '<unnamed>' and c++filt's
    '(anonymous namespace)' included). dev/gpu/sass_stats.py uses it too."""
    name = re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    return re.sub(r"\b[\w:<>]*::(?=\w)", "", name[:cut]).strip()


def category_of(name):
    for category, pattern in CATEGORIES:
        if re.search(pattern, name):
            return category
    return "other"


def print_medians(launches, min_us):
    durations = collections.OrderedDict()  # in order of first launch
    for name, _, us in launches:
        durations.setdefault(short_name(name), []).append(us)
    print(f"{'median us':>10} {'calls':>6}  kernel")
    for name, values in durations.items():
        if statistics.median(values) >= min_us:
            print(f"{statistics.median(values):10.1f} {len(values):6d}  {name[:100]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --csv --metrics gpu__time_duration.sum output")
    ap.add_argument("--marker", default="image_to_patches", help="regex of the kernel that starts each step")
    ap.add_argument("--top", type=int, default=30, help="kernels listed (default 30)")
    ap.add_argument("--medians", action="store_true", help="each kernel's median duration over all launches")
    ap.add_argument("--min-us", type=float, default=0.0, help="with --medians: leave out kernels below this median")
    args = ap.parse_args()
    launches = read_launches(args.csv)
    if args.medians:
        print_medians(launches, args.min_us)
        return
    starts = [i for i, (name, _, _) in enumerate(launches) if re.search(args.marker, name)]
    if len(starts) >= 2:
        first, last = starts[-2], starts[-1]
        what = f"step {len(starts) - 1} of {len(starts)} marked (launches {first}..{last - 1})"
    else:
        first, last = 0, len(launches)
        what = f"all {len(launches)} launches (fewer than two '{args.marker}' launches: no step boundaries)"
    step = launches[first:last]
    total = sum(us for _, _, us in step)
    print(f"{what}: {len(step)} kernels, {total / 1e3:.2f} ms of kernel time, each kernel alone on the GPU")
    by_category = collections.defaultdict(float)
    by_kernel = collections.defaultdict(lambda: [0.0, 0])
    for name, grid, us in step:
        by_category[category_of(name)] += us
        entry = by_kernel[(short_name(name), grid)]
        entry[0] += us
        entry[1] += 1
    print(f"\n{'category':<24} {'ms':>8} {'share':>7}")
    for category, us in sorted(by_category.items(), key=lambda kv: -kv[1]):
        print(f"{category:<24} {us / 1e3:8.3f} {100 * us / total:6.1f}%")
    print(f"\n{'ms':>8} {'calls':>6} {'us/call':>9}  kernel (grid)")
    for (name, grid), (us, calls) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{us / 1e3:8.3f} {calls:6d} {us / calls:9.1f}  {name[:90]} {grid}")


if __name__ == "__main__":
    main()
