#!/usr/bin/env bash
# dev/gpu/gpu_ab.sh: alternation order (reversed in even rounds) and labels, the AB_GREP filter, AB_ENV_NEW on the new side only, AB_VARIANTS
# (extra new-side runs with their own labels), a run past
# AB_TIMEOUT reported with exit status 1, and a missing binary refused with 2.
set -uo pipefail
ab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A fake benchmark: prints its name, an environment variable and its arguments, plus a line the filter drops.
for side in old new; do
  cat >"$dir/$side" <<SCRIPT
#!/usr/bin/env bash
echo "row $side tag=\${AB_TEST_TAG:-none} args=\$*"
echo "noise"
SCRIPT
  chmod +x "$dir/$side"
done

out=$(ROUNDS=2 AB_GREP='^row' AB_ENV_NEW="AB_TEST_TAG=x" bash "$ab" "$dir/old" "$dir/new" --a 1) || fail "exit status $?"
expected="== round 1, old: $dir/old 
row old tag=none args=--a 1
== round 1, new: $dir/new AB_TEST_TAG=x
row new tag=x args=--a 1
== round 2, new: $dir/new AB_TEST_TAG=x
row new tag=x args=--a 1
== round 2, old: $dir/old 
row old tag=none args=--a 1"
[ "$out" = "$expected" ] || fail "unexpected output:
$out"

# AB_VARIANTS: the new binary once more per entry each round, after AB_ENV_NEW's words, labelled new[ENTRY].
out=$(ROUNDS=1 AB_GREP='^row' AB_ENV_NEW="AB_TEST_TAG=x" AB_VARIANTS="AB_TEST_TAG=y; AB_OTHER=1" \
  bash "$ab" "$dir/old" "$dir/new") || fail "variants: exit status $?"
expected="== round 1, old: $dir/old 
row old tag=none args=
== round 1, new: $dir/new AB_TEST_TAG=x
row new tag=x args=
== round 1, new[AB_TEST_TAG=y]: $dir/new AB_TEST_TAG=x AB_TEST_TAG=y
row new tag=y args=
== round 1, new[AB_OTHER=1]: $dir/new AB_TEST_TAG=x AB_OTHER=1
row new tag=x args="
[ "$out" = "$expected" ] || fail "unexpected variants output:
$out"

printf '#!/usr/bin/env bash\nsleep 5\n' >"$dir/slow"
chmod +x "$dir/slow"
out=$(ROUNDS=1 AB_TIMEOUT=1 bash "$ab" "$dir/old" "$dir/slow")
rc=$?
[ $rc -eq 1 ] || fail "a timed-out run gave exit status $rc, not 1"
grep -q "timed out after 1 s" <<<"$out" || fail "no timeout message: $out"

bash "$ab" "$dir/missing" "$dir/new" 2>/dev/null
rc=$?
[ $rc -eq 2 ] || fail "a missing binary gave exit status $rc, not 2"
echo "gpu_ab_test: ok"
