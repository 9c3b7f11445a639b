#!/usr/bin/env bash
# Builds one git ref (a branch, a commit) in its own worktree and copies the executables of the named targets into
# DEST, so two builds can be compared in one call on the GPU machine (dev/gpu/gpu_ab.sh OLD NEW ...) without
# touching the main checkout. The worktree and its build directory are kept, so building the ref again, or another
# ref into the same worktree, is incremental.
#
#   dev/gpu/build_ref.sh REF DEST TARGET...
#   e.g. dev/gpu/build_ref.sh exp/sm90-gemm .carry/gemm vlm bench_gemm_sm90 gemm_sm90_test
#
# Environment: PRESET (CMake configure preset, default cuda: sm_90a), WORKTREE (default: ../vlm-worktrees/<ref with
# '/' as '_'> beside the repository).
set -euo pipefail
die() { echo "build_ref: $*" >&2; exit 2; }
[ $# -ge 3 ] || die "usage: dev/gpu/build_ref.sh REF DEST TARGET..."
ref=$1
dest=$2
shift 2
root=$(git rev-parse --show-toplevel) || die "not inside a git repository"
sha=$(git -C "$root" rev-parse --verify --quiet "$ref^{commit}") || die "'$ref' is not a commit of $root"
tree=${WORKTREE:-$(dirname "$root")/vlm-worktrees/${ref//\//_}}
preset=${PRESET:-cuda}
if [ -e "$tree/.git" ]; then
  git -C "$tree" checkout -q --detach "$sha"
else
  git -C "$root" worktree add -q --detach "$tree" "$sha"
fi
echo "build_ref: $ref ($sha) in $tree, preset $preset"
(cd "$tree" && cmake --preset "$preset" >/dev/null)
build_dir=$(python3 - "$tree" "$preset" <<'PY'
import json, sys
tree, preset = sys.argv[1], sys.argv[2]
for p in json.load(open(f"{tree}/CMakePresets.json"))["configurePresets"]:
    if p["name"] == preset:
        print(p["binaryDir"].replace("${sourceDir}", tree))
        break
else:
    sys.exit(f"build_ref: no configure preset '{preset}' in {tree}/CMakePresets.json")
PY
)
cmake --build "$build_dir" -j"$(nproc)" --target "$@"
mkdir -p "$dest"
for target in "$@"; do
  exe=$(find "$build_dir" -type f -name "$target" -perm -u+x -not -path "*/CMakeFiles/*" | head -1)
  [ -n "$exe" ] || die "target $target built no executable under $build_dir"
  cp "$exe" "$dest/"
  echo "build_ref: $dest/$target"
done
