// Pairwise (tree) reductions over one thread's registers, for the Hopper forward's softmax. A left-to-right max over
// N values is a chain of N - 1 dependent FMNMX; the tree is ceil(log2 N) deep, and the d=64 forward waits mostly on
// such fixed-latency dependencies. Plain header code, compiled for the device in the kernel and for the host in the
// CPU tests.
#pragma once

#include <cmath>

#include "kernels/cuda/flash/flash_schedule.h"  // VLM_FLASH_HD

namespace vlm::flash {

template <int N>
struct TreeMax {
  // max of v[0 .. N), overwriting v: the upper half folds onto the lower (the middle one stays when N is odd).
  VLM_FLASH_HD static float run(float* v) {
    constexpr int kHalf = (N + 1) / 2;
#ifdef __CUDACC__  // (host compilers warn on the pragma; the loop's bound is a constant, so they unroll it anyway)
#pragma unroll
#endif
    for (int j = 0; j < N - kHalf; ++j) v[j] = fmaxf(v[j], v[j + kHalf]);
    return TreeMax<kHalf>::run(v);
  }
};
template <>
struct TreeMax<1> {
  VLM_FLASH_HD static float run(float* v) { return v[0]; }
};

// The max of an array (destroyed), by TreeMax.
template <int N>
VLM_FLASH_HD float tree_max(float (&v)[N]) {
  static_assert(N >= 1, "tree_max of nothing");
  return TreeMax<N>::run(v);
}

}  // namespace vlm::flash
