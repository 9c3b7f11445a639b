#!/usr/bin/env bash
# The README's serve demo, run from the README itself (ctest readme.serve_demo, label cpu): the code blocks marked
# `<!-- readme-demo: NAME -->` are extracted and run as written (train, serve + curl, the Node openai call; the
# Python block is compiled, and run when Python's openai package is installed), with only these changes, each of
# which must apply or the test fails (so the README cannot drift from what runs):
#   * `vlm` is the binary under test (first on PATH);
#   * training: --samples 50000 becomes README_DEMO_STEPS x 16 (one pass, as in the README's run), and the train
#     command gets --set train.steps=README_DEMO_STEPS --set eval.samples=30 --quiet;
#   * port 8000 becomes a free port (the server line gets --port).
# The answers are checked against the held-out sample's own question/answer list (000000000.json in the same
# tar): with the README's full 3000 steps (README_DEMO_STEPS=3000, ~6-10 min) or README_DEMO_STRICT=1 each answer
# must be the right shape / colour; with CI's short run (default 200 steps, about a minute on 2 cores) the model
# is not that good yet, so each answer must be a word of the question's kind (a shape for a shape question, a colour
# for a colour question), the curl and `vlm generate` answers must be equal, and the training's held-out accuracy is
# printed. README_DEMO_FROM=CHECKOUT uses the run scripts/demo.sh trained there (runs/shapes-tiny, data/shapes)
# instead of training, and requires the right answers.
# usage: readme_demo_test.sh VLM_BINARY WORK_DIR NPM_DIR     (the openai package is installed into NPM_DIR once)
# Exit 77 (skipped) when npm cannot install the package.
set -euo pipefail
vlm=$(realpath "$1"); work=$2; mkdir -p "$3"; npm_dir=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
say() { echo "[readme-demo] $*"; }
steps=${README_DEMO_STEPS:-200}
full_steps=$(sed -n 's/^steps = \([0-9]*\).*/\1/p' "$repo/configs/shapes-tiny.toml")
strict=${README_DEMO_STRICT:-0}
[ "$steps" -ge "$full_steps" ] && strict=1
rm -rf "$work"; mkdir -p "$work"; work=$(realpath "$work"); cd "$work"
py=/usr/bin/python3  # Debian's; a pyenv python3 on PATH may lack what the checks use
[ -x $py ] || py=python3

if [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
  say "installing the openai npm package into $npm_dir"
  if ! npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error openai@4.104.0 >npm.log 2>&1; then
    cat npm.log; say "SKIP: npm could not install openai"; exit 77
  fi
fi
ln -s "$npm_dir/node_modules" node_modules  # `import OpenAI from "openai"` resolves from the script's folder
mkdir -p configs && cp "$repo/configs/shapes-tiny.toml" configs/
mkdir -p bin && ln -s "$vlm" bin/vlm
export PATH="$work/bin:$PATH"

# block NAME OUT: the README's block marked NAME into OUT (fails when there is none).
block() {
  awk -v m="<!-- readme-demo: $1 -->" '$0 == m {f = 1; next} f == 1 && /^```/ {f = 2; next}
    f == 2 && /^```/ {exit} f == 2 {print}' "$repo/README.md" > "$2"
  [ -s "$2" ] || { say "README.md has no block marked readme-demo: $1"; exit 1; }
}
# change FILE FROM TO: replaces every FROM in FILE (literally); fails when FROM is not there.
change() {
  $py - "$@" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if old not in text:
    sys.exit(f"[readme-demo] the README block {path} no longer has {old!r}: update readme_demo_test.sh with it")
open(path, "w").write(text.replace(old, new))
PY
}

block train train.sh
change train.sh "--samples 50000" "--samples $((steps * 16))"
change train.sh "vlm train --config configs/shapes-tiny.toml --run-dir runs/shapes-tiny" \
  "vlm train --config configs/shapes-tiny.toml --run-dir runs/shapes-tiny --set train.steps=$steps --set eval.samples=30 --quiet"
if [ -n "${README_DEMO_FROM:-}" ]; then
  # A checkout where scripts/demo.sh (or the train block) already ran: its trained run and data, the full run.
  from=$(realpath "$README_DEMO_FROM")
  [ -d "$from/runs/shapes-tiny/checkpoints" ] && [ -d "$from/data/shapes/val" ] ||
    { say "README_DEMO_FROM=$from has no trained runs/shapes-tiny and data/shapes"; exit 1; }
  mkdir -p runs && ln -s "$from/runs/shapes-tiny" runs/shapes-tiny && ln -s "$from/data" data
  strict=1
  say "using the trained demo run in $from (the train block is not run)"
else
  say "training ($steps steps): the README's train block"
  start=$(date +%s)
  bash -euo pipefail train.sh >train.log 2>&1 || { cat train.log; say "the train block failed"; exit 1; }
  say "trained in $(( $(date +%s) - start )) s; $(grep -E '^vqa:' train.log || true)"
  grep -E '^  by question type' train.log || true
fi

port=$($py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
block serve serve.sh
block node node.mjs
block python python.py
change serve.sh "vlm serve runs/shapes-tiny &" "vlm serve runs/shapes-tiny --port $port &"
for f in serve.sh node.mjs python.py; do
  $py - "$f" "$port" <<'PY'
import re, sys
path, port = sys.argv[1:3]
text = open(path).read()
new, n = re.subn(r"(localhost|127\.0\.0\.1):8000\b", rf"127.0.0.1:{port}", text)
if n == 0:
    sys.exit(f"[readme-demo] the README block {path} does not name port 8000")
open(path, "w").write(new)
PY
done

say "serving: the README's serve block (curl)"
server=""
trap '[ -n "$server" ] && kill $server 2>/dev/null; true' EXIT
set +e
source serve.sh >curl.json 2>serve.log
rc=$?
server=$!
set -e
[ "$rc" = 0 ] && [ -s curl.json ] || { cat serve.log curl.json; say "the serve block failed ($rc)"; exit 1; }

say "the README's Node block"
node node.mjs >node.txt 2>node.err || { cat node.err serve.log; say "the Node block failed"; exit 1; }
if $py -c "import openai" 2>/dev/null; then
  say "the README's Python block"
  $py python.py >python.txt
else
  say "the README's Python block: compiled only (Python's openai package is not installed)"
  $py -m py_compile python.py
fi

# The same questions through `vlm generate` (greedy, the same engine): the served answers must equal them.
question() { $py -c 'import re, sys; print(re.search(r"\"?text\"?: \"([^\"]+\?)\"", open(sys.argv[1]).read()).group(1))' "$1"; }
q_curl=$(question serve.sh); q_node=$(question node.mjs)
tar -xf data/shapes/val/shapes-000000.tar 000000000.json
gen() { vlm generate runs/shapes-tiny --image 000000000.jpg --prompt "$1" --max-tokens 256 2>>generate.log; }
$py - "$strict" "$q_curl" "$q_node" "$(gen "$q_curl")" "$(gen "$q_node")" <<'PY'
import json, sys
strict, q_curl, q_node, gen_curl, gen_node = sys.argv[1] == "1", *sys.argv[2:6]
sample = json.load(open("000000000.json"))
truth = {p["question"]: p["answer"] for p in sample["qa"]}
reply = json.load(open("curl.json"))
assert reply["object"] == "chat.completion" and reply["model"] == "shapes-tiny", reply
assert reply["choices"][0]["message"]["role"] == "assistant", reply
answers = [("curl", q_curl, reply["choices"][0]["message"]["content"]),
           ("node", q_node, open("node.txt").read().rstrip("\n"))]
try:
    answers.append(("python", q_node, open("python.txt").read().rstrip("\n")))
except FileNotFoundError:
    pass
shapes, colours = {"circle", "square", "triangle"}, {"red", "green", "blue", "yellow", "purple"}
failed = False
for who, q, a in answers:
    assert q in truth, f"the README asks {q!r}, which is not one of the sample's questions: {sorted(truth)}"
    want = truth[q]
    kind = shapes if want in shapes else colours
    ok = a.strip() == want if strict else a.strip() in kind
    print(f"[readme-demo] {who}: {q!r} -> {a!r} (the sample's answer: {want!r}; "
          f"{'must equal it' if strict else 'must be a ' + ('shape' if kind is shapes else 'colour')}): "
          f"{'ok' if ok else 'WRONG'}")
    failed |= not ok
assert reply["choices"][0]["message"]["content"].rstrip("\n") == gen_curl, f"served {answers[0][2]!r}, vlm generate {gen_curl!r}"
assert answers[1][2] == gen_node, f"served {answers[1][2]!r}, vlm generate {gen_node!r}"
print("[readme-demo] the served answers equal vlm generate's")
sys.exit(1 if failed else 0)
PY
kill $server; wait $server 2>/dev/null || true
server=""
say "passed"
