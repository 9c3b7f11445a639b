#!/usr/bin/env bash
# dev/gpu/build_ref.sh: refuses a missing argument and a ref that is no commit (exit 2, a message naming the ref),
# before it creates any worktree. (Building a ref takes minutes; it was run by hand: PRESET=cpu ... main DIR test_core.)
set -uo pipefail
script=$1
fail() { echo "FAIL: $*"; exit 1; }
cd "$(dirname "$script")/../.." || fail "no repository at $script"
before=$(git worktree list | wc -l)
msg=$(bash "$script" main /tmp/unused 2>&1) && fail "accepted a call without targets"
[ $? -eq 2 ] || fail "usage error should exit 2"
echo "$msg" | grep -q "usage: dev/gpu/build_ref.sh REF DEST TARGET" || fail "usage message: $msg"
msg=$(bash "$script" no/such-ref-xyz /tmp/unused vlm 2>&1) && fail "accepted an unknown ref"
echo "$msg" | grep -q "'no/such-ref-xyz' is not a commit" || fail "unknown-ref message: $msg"
[ "$(git worktree list | wc -l)" = "$before" ] || fail "a refused call created a worktree"
echo "build_ref tests passed"
