#!/usr/bin/env bash
# dev/gpu/check_pdl.py: it finds a kernel that does not begin with pdl::grid_begin() or grid_begin_prefetch (also
# one with __launch_bounds__, and one whose call sits after other statements), accepts preprocessor lines, comments
# and declarations before a definition, and passes on the real tree (src/kernels/cuda).
set -uo pipefail
tool=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$dir/good.cu" <<'CU'
// __global__ void in_a_comment(int x) { x = 1; }
template <class T>
__global__ void declared_only(T* x);
template <class T>
__global__ void __launch_bounds__(256, 2) bounded(T* x, const char* s = "__global__ void fake() {") {
  pdl::grid_begin();
  x[0] = 1;
}
__global__ void guarded(int* x) {
#if VLM_FLASH_SM90A
  // a comment
  vlm::pdl::grid_begin();
  x[0] = 2;
#endif
}
__global__ void warms_weights(const float* w, float* y, int n) {
  pdl::grid_begin_prefetch(
      w + blockIdx.x * n, n * 4);
  y[0] = w[0];
}
CU
out=$(python3 "$tool" "$dir/good.cu") || fail "good fixture rejected: $out"
echo "$out" | grep -q "3 kernels begin" || fail "expected 3 kernels checked, got: $out"

cat >"$dir/bad.cu" <<'CU'
__global__ void __launch_bounds__(128) late(int* x) {
  x[0] = 1;
  pdl::grid_begin();
}
__global__ void fine(int* x) {
  pdl::grid_begin();
}
__global__ void missing(float* y,
                        int n) {
  __shared__ float s[32];
  y[0] = s[0];
}
CU
out=$(python3 "$tool" "$dir/bad.cu")
[ $? -eq 1 ] || fail "bad fixture accepted: $out"
echo "$out" | grep -q "bad.cu:1: late" || fail "late not reported: $out"
echo "$out" | grep -q "bad.cu:8: missing" || fail "missing not reported: $out"
echo "$out" | grep -q ": fine" && fail "fine reported: $out"
echo "$out" | grep -q "2 of 3 kernels" || fail "expected 2 of 3: $out"

out=$(python3 "$tool" "$dir/empty_dir_that_does_not_exist" 2>&1)
[ $? -eq 1 ] || fail "no kernels found should fail: $out"

out=$(python3 "$tool" "$src") || fail "the tree breaks the contract: $out"
echo "$out"
echo PASS
