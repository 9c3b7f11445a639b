#!/usr/bin/env python3
"""The programmatic-dependent-launch contract of src/kernels/cuda/pdl.cuh: every __global__ function under the given
directories (default src/kernels/cuda) calls pdl::grid_begin() (or pdl::grid_begin_prefetch(...), which only
warms L2 before it) as the first statement of its body (preprocessor lines and comments before it are allowed), so that launching any of them with the PDL attribute can never let it
read or write global memory before the previous kernel in its stream has finished.

  dev/gpu/check_pdl.py [DIR_OR_FILE ...]

Prints each offending kernel as FILE:LINE: NAME and exits 1 when there is any; exits 0 and prints the number of
kernels checked otherwise.
"""
import os
import re
import sys

GLOBAL = re.compile(r"__global__\b")
NAME = re.compile(r"(\w+)\s*\($")


def strip_comments(text):
    """Comments and string contents blanked out, line breaks kept (so offsets still map to line numbers)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + " " * (min(j, n) - i - 1) + ('"' if j < n else ""))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def kernels(path):
    """(line, name, first statement) of each __global__ function definition in the file."""
    text = strip_comments(open(path, encoding="utf-8").read())
    found = []
    for m in GLOBAL.finditer(text):
        # The parameter list: the first '(' after the name, matched to its ')'; then either ';' (a declaration)
        # or the body's '{' (attributes such as __launch_bounds__(...) may come between, before the name).
        i = m.end()
        depth, name, params_end = 0, None, None
        while i < len(text):
            c = text[i]
            if c == "(":
                if depth == 0 and name is None:
                    nm = NAME.search(text[m.end():i + 1].replace("\n", " "))
                    head = text[m.end():i].rstrip()
                    if nm and not head.endswith("__launch_bounds__"):
                        name = nm.group(1)
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0 and name is not None:
                    params_end = i
                    break
            elif c in ";{" and depth == 0:
                break
            i += 1
        if params_end is None:
            continue
        j = params_end + 1
        while j < len(text) and text[j] not in ";{":
            j += 1
        if j >= len(text) or text[j] == ";":
            continue  # a declaration
        body = text[j + 1:]
        # The first statement: skip blank space and preprocessor lines (#if VLM_FLASH_SM90A ...).
        lines = body.split("\n")
        first = ""
        for k, line in enumerate(lines):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            first = s
            break
        found.append((text.count("\n", 0, m.start()) + 1, name, first))
    return found


def sources(args):
    for a in args:
        if os.path.isfile(a):
            yield a
            continue
        for root, _, files in os.walk(a):
            for f in sorted(files):
                if f.endswith((".cu", ".cuh")):
                    yield os.path.join(root, f)


def main(argv):
    roots = argv[1:] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "kernels", "cuda")]
    bad, count = [], 0
    for path in sources(roots):
        for line, name, first in kernels(path):
            count += 1
            if not re.match(r"(::)?(vlm::)?pdl::(grid_begin\(\)\s*;|grid_begin_prefetch\()", first):
                bad.append(f"{path}:{line}: {name} (first statement: {first[:60]!r})")
    if count == 0:
        print("check_pdl: no __global__ functions found under", " ".join(roots))
        return 1
    for b in bad:
        print(b)
    if bad:
        print(f"check_pdl: {len(bad)} of {count} kernels do not begin with pdl::grid_begin()")
        return 1
    print(f"check_pdl: {count} kernels begin with pdl::grid_begin()")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
