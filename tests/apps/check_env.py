#!/usr/bin/env python3
"""Checks the environment registry (src/core/env.cpp) against the sources and docs/env.md.

  check_env.py scan VLM ROOT      every VLM_* variable read in ROOT's src/ apps/ bench/ tests/ python/ scripts/ cmake/
                                  is declared, C++ reads go through core/env.h's accessors, and every declared
                                  variable is read where its "read by" says
  check_env.py docs VLM ROOT      ROOT/docs/env.md is what `VLM --help-env --markdown` prints
  check_env.py selftest VLM ROOT  the scanner finds the reads in a few samples and nothing else

VLM is the vlm binary (the registry's names come from `vlm --help-env --markdown`). Only environment reads count:
getenv("VLM_X") and the accessors env::flag / integer / integer_if_set / text("VLM_X") and EnvSwitch x("VLM_X") in
C++, os.environ / os.getenv in Python (and in shell here-documents), $VLM_X / ${VLM_X...} in shell, $ENV{VLM_X} in
CMake. Compile-time names (VLM_CHECK, VLM_HAVE_CUDA, -DVLM_CUDA=ON) and assignments (VLM_JOBS=2 cmd) are not reads.
Exempt: dev/ (the GPU lab tooling sets variables for the binaries it runs and reads its own) and this file.
"""
import difflib
import os
import re
import subprocess
import sys

NAME = r"(VLM_[A-Z0-9_]+)"
CPP_RAW = re.compile(r"\b(?:secure_)?getenv\s*\(\s*\"" + NAME + "\"")
CPP_ACCESSOR = re.compile(r"\benv::(?:flag|integer|integer_if_set|text)\s*\(\s*\"" + NAME + "\"")
CPP_SWITCH = re.compile(r"\bEnvSwitch\s+\w+\s*[({]\s*\"" + NAME + "\"")
PYTHON = re.compile(r"\b(?:environ\s*(?:\.get\s*\(|\[)|getenv\s*\()\s*[\"']" + NAME + "[\"']")
SHELL = re.compile(r"\$\{?#?" + NAME + r"\b")
CMAKE = re.compile(r"\$(?:ENV|env)\{" + NAME + r"\}")

CPP_EXT = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")
SCAN_DIRS = ("src", "apps", "bench", "tests", "python", "scripts", "cmake")
REGISTRY = "src/core/env.cpp"


def reads_in(path, text):
    """(name, line, raw) for each environment read in `text`; raw: a C++ getenv outside the registry."""
    base = os.path.basename(path)
    if path.endswith(CPP_EXT):
        rules = [(CPP_RAW, path != REGISTRY), (CPP_ACCESSOR, False), (CPP_SWITCH, False)]
    elif base.endswith(".py"):
        rules = [(PYTHON, False)]
    elif base.endswith((".sh", ".bash")) or text.startswith("#!/usr/bin/env bash") or text.startswith("#!/bin/"):
        rules = [(SHELL, False), (PYTHON, False)]
    elif base == "CMakeLists.txt" or base.endswith((".cmake", ".json")):
        rules = [(CMAKE, False)]
    else:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for rule, raw in rules:
            for m in rule.finditer(line):
                found.append((m.group(1), number, raw))
    return found


def exempt(rel):
    return rel.startswith("dev/") or rel == "tests/apps/check_env.py"  # this file: its samples are not reads


def scan(root):
    """{name: [(path, line, raw), ...]} over the scanned folders and the top-level CMake files."""
    files = [f for f in ("CMakeLists.txt", "CMakePresets.json") if os.path.isfile(os.path.join(root, f))]
    for top in SCAN_DIRS:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for n in sorted(names):
                files.append(os.path.relpath(os.path.join(folder, n), root).replace(os.sep, "/"))
    reads = {}
    for rel in files:
        if exempt(rel):
            continue
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue  # binary fixtures
        for name, line, raw in reads_in(rel, text):
            reads.setdefault(name, []).append((rel, line, raw))
    return reads


def registry(vlm):
    """{name: read_by} from the Markdown table of `vlm --help-env --markdown`."""
    md = subprocess.run([vlm, "--help-env", "--markdown"], check=True, capture_output=True, text=True).stdout
    entries = {}
    for line in md.splitlines():
        if not line.startswith("| `VLM_"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        entries[cells[0].strip("`")] = cells[3]
    return md, entries


def check_scan(vlm, root):
    _, declared = registry(vlm)
    reads = scan(root)
    errors = []
    for name, sites in sorted(reads.items()):
        for path, line, raw in sites:
            if name not in declared:
                errors.append(f"{path}:{line}: reads {name}, which src/core/env.cpp's registry does not declare")
            elif raw:
                errors.append(f"{path}:{line}: reads {name} with getenv; use core/env.h's accessors")
    for name, read_by in sorted(declared.items()):
        paths = [p for p, _, _ in reads.get(name, [])]
        if read_by == "vlm":
            wanted = [("src/", any(p.startswith("src/") for p in paths))]
        else:
            wanted = [(w, any(p == w or p.startswith(w.rstrip("/") + "/") for p in paths))
                      for w in (x.strip() for x in read_by.split(","))]
        for where, ok in wanted:
            if not ok:
                errors.append(f"{name} is declared as read by {where}, which does not read it "
                              f"(read in: {', '.join(sorted(set(paths))) or 'nothing'})")
    for e in errors:
        print(e)
    print(f"check_env scan: {len(declared)} declared, {len(reads)} read, {len(errors)} problem(s)")
    return 1 if errors else 0


def check_docs(vlm, root):
    md, _ = registry(vlm)
    path = os.path.join(root, "docs", "env.md")
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except OSError:
        current = ""
    if current == md:
        print("check_env docs: docs/env.md is current")
        return 0
    sys.stderr.writelines(difflib.unified_diff(current.splitlines(True), md.splitlines(True), "docs/env.md",
                                               "vlm --help-env --markdown"))
    print("check_env docs: docs/env.md differs from the registry; regenerate it with\n"
          "  build/apps/vlm/vlm --help-env --markdown > docs/env.md", file=sys.stderr)
    return 1


def selftest():
    cases = [
        ("a.cpp", 'VLM_CHECK(x, "VLM_NOPE");\n#ifdef VLM_HAVE_CUDA\nenv::flag("VLM_A"); std::getenv("VLM_B");\n'
                  'EnvSwitch s("VLM_C"); env::integer_if_set( "VLM_D" ); // getenv VLM_E\n',
         {("VLM_A", False), ("VLM_B", True), ("VLM_C", False), ("VLM_D", False)}),
        ("src/core/env.cpp", 'const char* v = std::getenv("VLM_F");\n', {("VLM_F", False)}),
        ("b.py", 'os.environ.get("VLM_G")\nos.environ["VLM_H"]\nos.getenv(\'VLM_I\')\n# VLM_J=1 does x\n'
                 'print("VLM_K")\n', {("VLM_G", False), ("VLM_H", False), ("VLM_I", False)}),
        ("c.sh", '#!/usr/bin/env bash\n# VLM_L=1 skips it\nVLM_M=0 cmd\njobs="${VLM_N:-$(nproc)}"\n'
                 '[ "$VLM_O" = 1 ]\ncmake -DVLM_CUDA=ON\n"$VLM" run\npython3 - <<EOF\nos.environ.get("VLM_P")\nEOF\n',
         {("VLM_N", False), ("VLM_O", False), ("VLM_P", False)}),
        ("CMakeLists.txt", 'if(VLM_CUDA)\nset(x $ENV{VLM_Q})\n', {("VLM_Q", False)}),
        ("d.md", '$VLM_R getenv("VLM_S")\n', set()),
    ]
    bad = 0
    for path, text, expected in cases:
        got = {(n, raw) for n, _, raw in reads_in(path, text)}
        if got != expected:
            print(f"check_env selftest: {path}: found {sorted(got)}, expected {sorted(expected)}", file=sys.stderr)
            bad += 1
    exempted = ["dev/gpu/gpu_flash.sh", "dev/gpu/tests/gpu_session_test.sh", "tests/apps/check_env.py"]
    scanned = ["scripts/build.sh", "scripts/gpu_x.sh", "src/dev/x.cpp", "tests/apps/test_cli.cpp"]
    if not all(exempt(p) for p in exempted) or any(exempt(p) for p in scanned):
        print("check_env selftest: wrong exemptions", file=sys.stderr)
        bad += 1
    print(f"check_env selftest: {len(cases)} samples, {bad} wrong")
    return 1 if bad else 0


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("scan", "docs", "selftest"):
        print(__doc__, file=sys.stderr)
        return 2
    what, vlm, root = sys.argv[1:]
    if what == "selftest":
        return selftest()
    return check_scan(vlm, root) if what == "scan" else check_docs(vlm, root)


if __name__ == "__main__":
    sys.exit(main())
