#!/usr/bin/env bash
# dev/gpu/check_tensorboard.py without TensorBoard (this machine has none; the GPU machine has it): the script
# compiles, prints its usage, and says that tensorboard is missing with exit code 2 instead of a traceback.
set -uo pipefail
tool=$1
fail() { echo "FAIL: $*"; exit 1; }
python3 -m py_compile "$tool" || fail "does not compile"
out=$(python3 "$tool" --help) || fail "--help failed: $out"
echo "$out" | grep -q "TensorBoard's own loader" || fail "--help does not describe the check: $out"
python3 "$tool" >/dev/null; [ $? -eq 2 ] || fail "no argument: expected exit 2"
if python3 -c "import tensorboard" 2>/dev/null; then
  echo "tensorboard is installed: the missing-package path is not exercised"
else
  out=$(python3 "$tool" /nonexistent); rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2 without tensorboard, got $rc: $out"
  echo "$out" | grep -q "tensorboard is not installed" || fail "unclear message: $out"
fi
echo "ok"
