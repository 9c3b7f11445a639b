#!/usr/bin/env python3
"""Instruction counts per kernel from SASS, to compare two builds of a kernel without running it.

Reads `cuobjdump -sass` output (a .sass text file), or a .cubin (running cuobjdump -sass on it: the GPU machine has
cuobjdump, the build machine does not; build the cubins here with dev/gpu/flash_ptxas.sh and carry them). Prints one
block per function: its static instruction count and the count of each opcode in --ops (default: the ones that told
the wgmma descriptor story in docs/flash.md: R2UR moves to uniform registers, HGMMA, uniform adds, barriers), and
with --top N its N most frequent opcodes. Static counts, not executed ones: a loop body counts once.

Usage: dev/gpu/sass_stats.py [--ops R2UR,HGMMA,...] [--top N] [--grep REGEX] FILE [FILE ...]
"""
import argparse
import collections
import re
import subprocess
import sys

from kernel_profile import short_name  # (dev/gpu/ is on the path when this runs as a script)

FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "        /*0120*/                   R2UR UR55, R2 ;     /* 0x... */" (an optional predicate before the opcode)
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?")
DEFAULT_OPS = "R2UR,HGMMA,UIADD3,UMOV,BAR,SYNCS,MUFU,FMNMX,FFMA,FADD,FMUL"


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return out.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return names


def parse(text):
    """{function: Counter(opcode)} in the order the functions appear."""
    functions = collections.OrderedDict()
    current = None
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            current = functions.setdefault(m.group(1), collections.Counter())
            continue
        m = INSTRUCTION.match(line)
        if m and current is not None:
            current[m.group(1)] += 1
    return functions


def read(path):
    if path.endswith(".cubin"):
        try:
            return subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True, check=True).stdout
        except OSError:
            sys.exit(f"sass_stats: {path} is a cubin and there is no cuobjdump here (run this on the GPU machine)")
        except subprocess.CalledProcessError as e:
            sys.exit(f"sass_stats: cuobjdump -sass {path} failed: {e.stderr.strip()}")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ops", default=DEFAULT_OPS, help="comma-separated opcodes to count (default %(default)s)")
    ap.add_argument("--top", type=int, default=0, help="also list each function's N most frequent opcodes")
    ap.add_argument("--grep", default="", help="only functions whose demangled name matches this regex")
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    for path in args.files:
        functions = parse(read(path))
        if not functions:
            print(f"sass_stats: no function found in {path} (is it cuobjdump -sass output?)", file=sys.stderr)
            return 1
        print(f"== {path}")
        names = demangle(list(functions))
        for (mangled, counts), name in zip(functions.items(), names):
            name = short_name(name)
            if args.grep and not re.search(args.grep, name):
                continue
            total = sum(counts.values())
            print(f"  {name}: {total} instructions; " + ", ".join(f"{o} {counts.get(o, 0)}" for o in ops))
            if args.top:
                print("    " + ", ".join(f"{o} {n}" for o, n in counts.most_common(args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
